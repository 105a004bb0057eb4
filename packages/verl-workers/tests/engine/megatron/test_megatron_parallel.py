"""strategy=megatron at world size 2 on CPU (gloo), each layout against the same model trained by the
FSDP2 engine on one process (HF weights, same batch, same PPO loss):

- TP=2 (sequence parallel): logits, log-probs, entropies, loss metrics, grad norm and the weights
  after one optimizer step; then a distributed checkpoint and a second step;
- PP=2 (1F1B over 3 micro-batches): the same; then it loads TP=2's checkpoint (resharded from tensor-
  to pipeline-parallel): weights exactly TP=2's, and the second step equals the reference's second
  step (so Adam's state came back). Both use the plain Megatron optimizer, whose state reshards;
- DP=2 with the distributed optimizer (Adam state sharded over both ranks): each rank gets half the rows.

One spawned pair of processes per layout; every check reads what the fixture's runs wrote.
"""

import os

import pytest
import torch
from verl.workers.engine.testing import make_rl_batch, run_gloo

pytestmark = pytest.mark.slow

LR = 1e-3
TEMPERATURE = 0.7
COMMON = [
    "actor_rollout_ref.model.enable_gradient_checkpointing=false",
    f"actor_rollout_ref.actor.optim.lr={LR}", "actor_rollout_ref.actor.optim.weight_decay=0.0",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.entropy_coeff=0.01",
]
PLAIN_OPTIMIZER = "actor_rollout_ref.actor.megatron.use_distributed_optimizer=false"
LAYOUTS = {
    "tp2": ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", PLAIN_OPTIMIZER],
    "pp2": ["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2", PLAIN_OPTIMIZER],
    "dp2": ["actor_rollout_ref.actor.megatron.use_distributed_optimizer=true"],
}


def _batches():
    return make_rl_batch(n=8, seed=5), make_rl_batch(n=8, seed=6)


def _actor(model_dir, strategy, extra, dp):
    from verl.trainer.config import load_config
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.engine import build_engine

    cfg = load_config([f"actor_rollout_ref.model.path={model_dir}", f"actor_rollout_ref.actor.strategy={strategy}",
                       *COMMON, *extra])
    actor_cfg = cfg.actor_rollout_ref.actor
    engine = build_engine(strategy, model_config=cfg.actor_rollout_ref.model,
                          engine_config=actor_cfg.megatron if strategy == "megatron" else actor_cfg.fsdp_config,
                          optim_config=actor_cfg.optim, grad_clip=actor_cfg.grad_clip, total_training_steps=10)
    return DataParallelPPOActor(actor_cfg, engine, ppo_mini_batch_size_per_rank=8 // dp)


def _log_probs_then_update(actor, data):
    data.meta_info.update(micro_batch_size=3, temperature=TEMPERATURE)
    lp, ent = actor.compute_log_prob(data, calculate_entropy=True)
    data.meta_info["temperature"] = 1.0
    return lp, ent, actor.update_policy(data)


def _vocab_logits(engine, data):
    """Logits at the positions predicting each response token, all-gathered over TP (PP=1 only)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu
    from verl.workers.engine.megatron.cpu import device_support
    from verl.workers.engine.megatron.schedule import prepare_micro_batch

    mb = prepare_micro_batch(data.batch, engine.device, engine.sizes.tp if engine.sizes.sequence_parallel else 1)
    with torch.no_grad(), device_support(engine.device):
        engine.chunks[0].eval()
        out = engine.chunks[0](input_ids=mb.tokens, position_ids=mb.position_ids, attention_mask=mb.attention_mask)
        parts = [torch.empty_like(out) for _ in range(engine.sizes.tp)]
        dist.all_gather(parts, out.contiguous(), group=mpu.get_tensor_model_parallel_group())
    full = torch.cat(parts, dim=-1)[..., : engine.shape.vocab_size]
    return full.gather(1, mb.gather_pos[..., None].expand(-1, -1, full.shape[-1]))


def _megatron_job(rank, world, model_dir, layout, out_dir, ckpt_dir):
    torch.manual_seed(0)
    actor = _actor(model_dir, "megatron", LAYOUTS[layout], dp=world // (2 if layout != "dp2" else 1))
    engine = actor.engine
    data1, data2 = (d.chunk(engine.dp_size)[engine.dp_rank] for d in _batches())
    res = {"dp_rank": engine.dp_rank, "initial": engine.full_state_dict()}
    if engine.sizes.pp == 1:
        res["logits"] = _vocab_logits(engine, data1)
    res["lp"], res["ent"], res["metrics"] = _log_probs_then_update(actor, data1)
    res["after"] = engine.full_state_dict()
    if layout == "tp2":
        engine.save_checkpoint(ckpt_dir, global_step=1)
        res["after2"] = _second_step(actor, data2)
    if layout == "pp2":
        engine.load_checkpoint(ckpt_dir)
        res["loaded"] = engine.full_state_dict()
        res["after2"] = _second_step(actor, data2)
    if engine.is_collect_rank:
        torch.save(res, os.path.join(out_dir, f"{layout}_rank{rank}.pt"))


def _second_step(actor, data):
    data.meta_info.update(temperature=1.0, global_steps=2)
    actor.update_policy(data)
    return actor.engine.full_state_dict()


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory, dist_world1):
    from transformers import AutoModelForCausalLM

    out = str(tmp_path_factory.mktemp("megatron_runs"))
    ckpt = os.path.join(out, "ckpt")
    for layout in ("tp2", "pp2", "dp2"):  # pp2 loads tp2's checkpoint
        run_gloo(_megatron_job, 2, out, tiny_model_dir, layout, out, ckpt)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the spawned ranks: same summation order in every kernel
    try:
        ref_actor = _actor(tiny_model_dir, "fsdp2", [], dp=1)
        data1, data2 = _batches()
        hf = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        b = data1.batch
        with torch.no_grad():
            logits = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]).logits
        ref = {"initial": {k: v.clone() for k, v in hf.state_dict().items()}, "logits": logits[:, -6:-1]}
        ref["lp"], ref["ent"], ref["metrics"] = _log_probs_then_update(ref_actor, data1)
        ref["after"] = ref_actor.engine.full_state_dict()
        ref["after2"] = _second_step(ref_actor, data2)
    finally:
        torch.set_num_threads(threads)
    results = {}
    for layout in LAYOUTS:
        files = sorted(f for f in os.listdir(out) if f.startswith(layout + "_"))
        parts = sorted((torch.load(os.path.join(out, f), weights_only=False) for f in files), key=lambda r: r["dp_rank"])
        results[layout] = parts
    return ref, results, data1.batch["response_mask"].bool()


def _rows(parts, key):
    return torch.cat([p[key] for p in parts]) if len(parts) > 1 else parts[0][key]


def _assert_weights(got, expected, atol):
    assert sorted(got) == sorted(k for k in expected if k != "lm_head.weight")  # tied: HF saves no lm_head
    for name, value in got.items():
        torch.testing.assert_close(value, expected[name], atol=atol, rtol=0, msg=name)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_outputs_and_one_step_equal_the_single_process_reference(runs, layout):
    ref, results, mask = runs
    parts = results[layout]
    assert len(parts) == (2 if layout == "dp2" else 1)  # one collected rank per data-parallel rank
    # HF -> Megatron -> HF is exact, for any split
    _assert_weights(parts[0]["initial"], ref["initial"], atol=0)
    if "logits" in parts[0]:
        got = _rows(parts, "logits")
        torch.testing.assert_close(got[mask], ref["logits"][mask], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(_rows(parts, "lp")[mask], ref["lp"][mask], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(_rows(parts, "ent")[mask], ref["ent"][mask], atol=2e-6, rtol=1e-5)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/pg_clipfrac", "actor/grad_norm"):
        for p in parts:
            assert p["metrics"][key] == pytest.approx(ref["metrics"][key], rel=2e-6, abs=1e-7), key
    # Adam turns an element's gradient into a step of about lr whatever its size, so elements whose true
    # gradient is ~0 (e.g. the key bias: softmax ignores a shift shared by all keys) move by rounding
    # noise times lr/eps; the bound is 5% of lr, while the step itself moves weights by up to lr
    _assert_weights(parts[0]["after"], ref["after"], atol=0.05 * LR)
    moved = max((ref["after"][k] - ref["initial"][k]).abs().max().item() for k in parts[0]["after"])
    assert moved > 0.5 * LR


def test_distributed_checkpoint_reshards_tensor_to_pipeline_parallel_with_optimizer_state(runs):
    ref, results, _ = runs
    tp2, pp2 = results["tp2"][0], results["pp2"][0]
    _assert_weights(pp2["loaded"], tp2["after"], atol=0)  # saved under TP=2, loaded under PP=2: exact
    # two steps, each within the bound above
    _assert_weights(tp2["after2"], ref["after2"], atol=0.1 * LR)
    _assert_weights(pp2["after2"], ref["after2"], atol=0.1 * LR)
