"""A 2-worker RayWorkerGroup of ActorRolloutRefWorker (FSDP2 over gloo): generate, log-probs, update."""

import math

import pytest
import torch
from transformers import AutoTokenizer
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.workers.fsdp_workers import ActorRolloutRefWorker


def recomputed_log_probs(wg, gen):
    """The workers' log-probs of a generation (at its sampling temperature 1.0): equal to the log-probs
    the rollout recorded on every response token."""
    gen.meta_info["temperature"] = 1.0
    old = wg.compute_log_prob(gen)
    mask = gen.batch["response_mask"].bool()
    torch.testing.assert_close(
        old.batch["old_log_probs"][mask], gen.batch["rollout_log_probs"][mask], atol=1e-4, rtol=1e-4
    )
    return old


@pytest.mark.slow
def test_two_worker_hybrid_engine(ray_cluster, make_cfg, prompts_for, tiny_model_dir):
    cfg = make_cfg(
        tiny_model_dir,
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    )
    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, num_cpus_per_worker=0.5, max_colocate_count=1)
    cls = RayClassWithInitArgs(
        cls=ActorRolloutRefWorker,
        config=cfg.actor_rollout_ref,
        role="actor_rollout_ref",
        total_training_steps=2,
    )
    wg = RayWorkerGroup(pool, cls)
    try:
        assert wg.world_size == 2
        wg.init_model()
        tok = AutoTokenizer.from_pretrained(tiny_model_dir)
        # 2 prompts x n=2: each worker gets one prompt's group
        prompts = prompts_for(tok, ["12+30=", "7+7="], n=2, meta={"temperature": 1.0})
        gen = wg.generate_sequences(prompts)
        assert len(gen) == 4
        assert torch.equal(gen.batch["prompts"], prompts.batch["input_ids"])
        r = gen.batch["responses"].shape[1]
        assert 1 <= r <= 6

        # the same prompt on both ranks samples differently: each rank has its own random stream
        twins = wg.generate_sequences(prompts_for(tok, ["5+5=", "5+5="], meta={"temperature": 1.0}))
        assert not torch.equal(twins.batch["responses"][0], twins.batch["responses"][1])

        old = recomputed_log_probs(wg, gen)
        ref = wg.compute_ref_log_prob(gen)
        torch.testing.assert_close(ref.batch["ref_log_prob"], old.batch["old_log_probs"], atol=1e-5, rtol=0)

        batch = gen.union(old).union(ref)
        batch.batch["advantages"] = (
            torch.tensor([1.0, -1.0, 0.5, -0.5]).unsqueeze(1) * batch.batch["response_mask"]
        )
        metrics = wg.update_actor(batch).meta_info["metrics"]
        for name, values in metrics.items():
            values = values if isinstance(values, list) else [values]
            assert len(values) in (1, 2) and all(math.isfinite(float(v)) for v in values), name
        # both ranks report the same whole-batch numbers
        assert metrics["actor/pg_loss"][0] == metrics["actor/pg_loss"][1]

        greedy = prompts_for(tok, ["12+30=", "7+7="], n=2, meta={"do_sample": False, "temperature": 1.0})
        after = wg.generate_sequences(greedy)
        recomputed_log_probs(wg, after)
    finally:
        for actor in wg.workers:
            ray_cluster.kill(actor)


@pytest.mark.slow
def test_two_worker_sequence_parallel_group(ray_cluster, make_cfg, prompts_for, tiny_model_dir):
    """ulysses_sequence_parallel_size=2 over 2 workers: one SP group, one data-parallel rank. Both ranks
    get every row of the log-prob and update calls (one result comes back), and the SP log-probs equal
    the ones the (non-SP) generation forward computed."""
    cfg = make_cfg(
        tiny_model_dir,
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    )
    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, num_cpus_per_worker=0.5, max_colocate_count=1)
    cls = RayClassWithInitArgs(cls=ActorRolloutRefWorker, config=cfg.actor_rollout_ref, role="actor_rollout_ref",
                               total_training_steps=2)
    wg = RayWorkerGroup(pool, cls)
    try:
        wg.init_model()
        tok = AutoTokenizer.from_pretrained(tiny_model_dir)
        gen = wg.generate_sequences(prompts_for(tok, ["12+30=", "7+7="], n=2, meta={"temperature": 1.0}))
        assert len(gen) == 4  # generation still splits over both ranks
        old = recomputed_log_probs(wg, gen)
        ref = wg.compute_ref_log_prob(gen)
        assert len(old) == len(ref) == 4  # the SP group's two copies come back once
        torch.testing.assert_close(ref.batch["ref_log_prob"], old.batch["old_log_probs"], atol=1e-5, rtol=0)
        batch = gen.union(old).union(ref)
        batch.batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5]).unsqueeze(1) * batch.batch["response_mask"]
        metrics = wg.update_actor(batch).meta_info["metrics"]
        for name, values in metrics.items():  # one value per collected (data-parallel) worker
            values = values if isinstance(values, list) else [values]
            assert len(values) == 1 and math.isfinite(float(values[0])), name
        after = wg.generate_sequences(prompts_for(tok, ["12+30=", "7+7="], n=2,
                                                  meta={"do_sample": False, "temperature": 1.0}))
        recomputed_log_probs(wg, after)
    finally:
        for actor in wg.workers:
            ray_cluster.kill(actor)
