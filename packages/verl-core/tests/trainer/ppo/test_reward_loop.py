"""The reward loop in the synchronous trainer (toy CPU bandit workers): the generation stage hands each
chunk to the loop as it is generated, and chunk 0's samples start scoring before the last chunk has
finished generating (an order of recorded events, not a timing); GRPO still learns."""

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.ppo.reward_loop import RewardLoop, chunk_bounds

from . import bandit_workers as bw
from .test_ray_trainer import BanditTrainer, _assert_rises, bandit_config, make_trainer, read_jsonl


class TracingTrainer(BanditTrainer):
    """Keeps each step's reward-loop trace (the loop forgets it when the next round starts)."""

    traces: list

    def rule_reward(self, batch, metrics):
        out = super().rule_reward(batch, metrics)
        self.traces.append(list(self.reward_loop.trace))
        return out


def fit_traced(cfg) -> TracingTrainer:
    """Train ``cfg`` on the bandit task with the reward loop traced; the trainer (shut down) keeps the traces."""
    trainer = make_trainer(cfg, trainer_cls=TracingTrainer, reward_fn=bw.BanditScorer())
    trainer.traces = []
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return trainer


def test_chunks_are_scored_while_the_next_ones_generate_and_grpo_learns(ray_cluster, tmp_path):
    cfg = bandit_config(tmp_path, "algorithm.adv_estimator=grpo", "trainer.total_epochs=5",
                        "trainer.experiment_name=reward_loop", "reward.use_reward_loop=true",
                        "reward.reward_loop_chunks=4", "reward.num_workers=2")  # fmt: skip
    trainer = fit_traced(cfg)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    train = _assert_rises(rows, 20)
    assert all(r["reward_loop/chunks"] == 4 for r in train)
    assert len(trainer.traces) == 20
    for trace in trainer.traces:
        gen = [e for e in trace if e[0].startswith("gen")]
        assert gen == [(e, k) for k in range(4) for e in ("gen_start", "gen_end")]  # chunks generate in turn
        assert sorted(k for e, k in trace if e == "score_end") == [0, 1, 2, 3]  # every chunk was scored
        for k in range(4):  # a chunk is scored only after it was generated
            assert trace.index(("gen_end", k)) < trace.index(("score_start", k))
    # The overlap: chunk 0 began scoring before the last chunk finished generating. A loop that scored after
    # generation never shows it; a starved scoring thread on a loaded machine can miss it in some steps,
    # so it is required in some step, not in every one.
    overlapped = [t.index(("score_start", 0)) < t.index(("gen_end", 3)) for t in trainer.traces]
    assert any(overlapped), trainer.traces[0]
    assert any(r["reward_loop/overlapped_chunks"] >= 1 for r in train)


def test_loop_scores_equal_the_one_pass_function():
    """Chunks of different response widths (the bandit rollout pads to its batch's longest response),
    assembled over the joined batch, give the one-pass reward."""
    g = torch.Generator().manual_seed(0)
    n, r = 10, 4
    prompts = torch.randint(2, bw.VOCAB, (n, 3), generator=g)
    lengths = torch.randint(1, r + 1, (n,), generator=g)
    responses = torch.randint(2, bw.VOCAB, (n, r), generator=g)
    mask = (torch.arange(r) < lengths[:, None]).long()
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses * mask, "response_mask": mask},
        non_tensors={"uid": np.array([str(i) for i in range(n)], dtype=object)},
    )
    loop = RewardLoop(bw.BanditScorer(), 3)
    loop.start()
    for k, (start, end) in enumerate(chunk_bounds(n, 1, 3)):
        loop.submit(data.slice(start, end), k)
    out = loop.result(data)
    loop.close()
    one_pass = bw.bandit_reward_fn(data, return_dict=True)
    assert torch.equal(out["reward_tensor"], one_pass["reward_tensor"])
    assert out["reward_extra_info"] == one_pass["reward_extra_info"]
    # hand check: the score is on the last valid token and is 1 exactly when the first token is the target
    want = (responses[:, 0] == bw.target(prompts[:, -1])).float()
    assert torch.equal(out["reward_tensor"][torch.arange(n), lengths - 1], want)


def test_chunk_bounds_keep_groups_whole():
    assert chunk_bounds(5, 4, 2) == [(0, 12), (12, 20)]  # 3 + 2 groups of 4 rows
    assert chunk_bounds(2, 3, 4) == [(0, 3), (3, 6)]  # never more chunks than groups
    assert chunk_bounds(4, 1, 1) == [(0, 4)]


def test_a_plain_reward_function_is_refused_with_the_loop_on(ray_cluster, tmp_path):
    cfg = bandit_config(tmp_path, "reward.use_reward_loop=true")
    with pytest.raises(TypeError, match=r"reward.use_reward_loop=true needs a reward function that scores samples apart"):
        make_trainer(cfg, reward_fn=bw.bandit_reward_fn)


def test_dynamic_sampling_rounds_each_collect_their_own_scores(ray_cluster, tmp_path):
    """With algorithm.filter_groups every generation round goes through the loop and is collected by the
    reward stage of the same round before the filter drops groups by score."""
    cfg = bandit_config(tmp_path, "trainer.total_training_steps=2", "trainer.experiment_name=reward_loop_ds",
                        "trainer.val_before_train=false", "data.train_batch_size=2", "data.gen_batch_size=4",
                        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "algorithm.filter_groups.enable=true",
                        "algorithm.filter_groups.metric=acc", "reward.use_reward_loop=true",
                        "reward.reward_loop_chunks=2")  # fmt: skip
    trainer = fit_traced(cfg)
    train = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "critic/score/mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    rounds = sum(int(r["train/num_gen_batches"]) for r in train)
    assert len(trainer.traces) == rounds  # one reward-stage collection per generation round
    assert all(sorted(k for e, k in t if e == "score_end") == [0, 1] for t in trainer.traces)


def test_a_trainer_with_its_own_rollout_pool_refuses_the_loop(ray_cluster, tmp_path):
    class OwnPool(BanditTrainer):
        separate_rollout_pool = True  # as recipes/fully_async's trainer, which scores samples as they finish

    cfg = bandit_config(tmp_path, "reward.use_reward_loop=true")
    with pytest.raises(ValueError, match="OwnPool generates on a rollout pool of its own"):
        make_trainer(cfg, trainer_cls=OwnPool, reward_fn=bw.BanditScorer())
