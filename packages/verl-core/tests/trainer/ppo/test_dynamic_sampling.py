"""Dynamic sampling without Ray: group filtering, accumulation over rounds, trimming, the max-rounds error,
and the trainer's filter stage driven through ``RayPPOTrainer.train_step``."""

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.trainer.config import load_config
from verl.trainer.ppo.dynamic_sampling import (
    DynamicSamplingError,
    GroupAccumulator,
    concat_rounds,
    metric_values,
    pad_responses,
    varied_group_rows,
)

P = 3  # prompt length of the synthetic batches


def scored_round(outcomes: list[list[float]], tag: str, r: int = 2, pad_id: int = 0) -> DataProto:
    """A scored generation round: one group per inner list (its trajectories' 0/1 outcomes).

    uids are ``{tag}{group}``; responses have ``r`` tokens; ``acc`` and ``token_level_scores`` (on the last
    token) hold the outcome, as the reward stage leaves them.
    """
    uids, acc = [], []
    for g, group in enumerate(outcomes):
        for o in group:
            uids.append(f"{tag}{g}")
            acc.append(o)
    rows = len(uids)
    responses = torch.arange(rows * r).reshape(rows, r) + 10
    scores = torch.zeros(rows, r)
    scores[:, -1] = torch.tensor(acc)
    prompts = torch.full((rows, P), 7)
    pos = torch.arange(P + r).expand(rows, -1)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "response_mask": torch.ones(rows, r, dtype=torch.long),
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": torch.ones(rows, P + r, dtype=torch.long),
            "position_ids": pos.clone(),
            "token_level_scores": scores,
        },
        non_tensors={"uid": np.array(uids, dtype=object), "acc": np.array(acc, dtype=object)},
        meta_info={"global_steps": 1},
    )


def test_varied_group_rows_keeps_only_mixed_groups_and_singletons():
    uids = np.array(["a", "a", "b", "b", "c", "c", "d"], dtype=object)
    values = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    rows, kept, dropped = varied_group_rows(uids, values)
    # a is mixed, b all right, c all wrong (both dropped), d is a group of one (kept, as upstream)
    assert rows.tolist() == [0, 1, 6]
    assert (kept, dropped) == (2, 2)


def test_varied_group_rows_handles_interleaved_uids():
    uids = np.array(["x", "y", "x", "y"], dtype=object)
    rows, kept, dropped = varied_group_rows(uids, np.array([0.0, 1.0, 1.0, 1.0]))
    assert rows.tolist() == [0, 2] and (kept, dropped) == (1, 1)


def test_metric_values_seq_reward_sums_scores_and_unknown_metric_names_columns():
    batch = scored_round([[1, 0], [0, 0]], "g")
    batch.batch["token_level_scores"][0, 0] = 0.5  # a second nonzero token in row 0
    assert metric_values(batch, "seq_reward").tolist() == [1.5, 0.0, 0.0, 0.0]
    assert metric_values(batch, "acc").tolist() == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(KeyError, match=r"metric='accuracy'.*\['acc', 'uid'\]"):
        metric_values(batch, "accuracy")


def test_accumulator_drops_groups_accumulates_rounds_and_trims():
    acc = GroupAccumulator(train_batch_size=3, n=2, metric="acc", max_num_gen_batches=5)
    acc.add(scored_round([[1, 1], [1, 0], [0, 0], [0, 1]], "r1g"))  # 2 kept, 2 dropped
    assert not acc.ready and acc.num_groups == 2 and acc.num_gen_batches == 1
    acc.add(scored_round([[1, 0], [0, 0], [1, 0], [1, 1]], "r2g"))  # 2 kept, 2 dropped
    assert acc.ready
    batch, metrics = acc.take()
    # exactly train_batch_size groups, whole groups, in arrival order: r1g1, r1g3, r2g0 (r2g2 trimmed)
    assert batch.non_tensor_batch["uid"].tolist() == ["r1g1", "r1g1", "r1g3", "r1g3", "r2g0", "r2g0"]
    assert batch.non_tensor_batch["acc"].tolist() == [1, 0, 0, 1, 1, 0]
    assert batch.batch["token_level_scores"][:, -1].tolist() == [1, 0, 0, 1, 1, 0]
    assert metrics == {
        "train/num_gen_batches": 2.0,
        "dynamic_sampling/kept_groups": 4.0,
        "dynamic_sampling/dropped_groups": 4.0,
        "dynamic_sampling/kept_group_ratio": 0.5,
        "dynamic_sampling/all_acc/mean": 8 / 16,  # every generated row, dropped ones too
    }
    # reset for the next step
    assert acc.num_groups == 0 and acc.num_gen_batches == 0 and not acc.ready


def test_accumulator_one_round_with_enough_groups_needs_no_copy_of_the_rest():
    acc = GroupAccumulator(train_batch_size=2, n=2, metric="acc")
    acc.add(scored_round([[1, 0], [0, 1]], "r"))
    batch, metrics = acc.take()
    assert (
        len(batch) == 4
        and metrics["train/num_gen_batches"] == 1.0
        and metrics["dynamic_sampling/dropped_groups"] == 0.0
    )


def test_accumulator_raises_after_max_num_gen_batches():
    acc = GroupAccumulator(train_batch_size=2, n=2, metric="acc", max_num_gen_batches=3)
    acc.add(scored_round([[1, 1], [0, 0]], "a"))
    acc.add(scored_round([[1, 0], [0, 0]], "b"))  # one varied group: still short
    with pytest.raises(DynamicSamplingError) as err:
        acc.add(scored_round([[0, 0], [1, 1]], "c"))
    msg = str(err.value)
    assert "max_num_gen_batches=3" in msg and "1 groups" in msg and "train_batch_size=2" in msg
    assert "5 dropped" in msg


def test_accumulator_without_limit_keeps_going():
    acc = GroupAccumulator(train_batch_size=1, n=2, metric="acc", max_num_gen_batches=0)
    for i in range(20):
        acc.add(scored_round([[0, 0]], f"z{i}"))
    assert acc.num_gen_batches == 20 and not acc.ready


def test_accumulator_rejects_a_round_that_is_not_whole_groups():
    acc = GroupAccumulator(train_batch_size=1, n=4, metric="acc")
    with pytest.raises(ValueError, match="6 rows, not a multiple of rollout.n=4"):
        acc.add(scored_round([[1, 0, 1], [0, 0, 1]], "q"))


def test_pad_responses_follows_the_rollout_convention():
    b = scored_round([[1, 0]], "p", r=2)
    out = pad_responses(b, 4, pad_token_id=99)
    assert out.batch["responses"].tolist() == [[10, 11, 99, 99], [12, 13, 99, 99]]
    assert out.batch["response_mask"].tolist() == [[1, 1, 0, 0]] * 2
    assert out.batch["input_ids"][0].tolist() == [7, 7, 7, 10, 11, 99, 99]
    assert out.batch["attention_mask"][0].tolist() == [1] * 5 + [0, 0]
    assert out.batch["position_ids"][0].tolist() == list(range(7))  # positions keep counting
    assert out.batch["token_level_scores"][0].tolist() == [0, 1, 0, 0]
    assert out.batch["prompts"].shape == (2, P)
    assert out.non_tensor_batch["uid"].tolist() == ["p0", "p0"]


def test_concat_rounds_of_different_response_lengths():
    a, b = scored_round([[1, 0]], "a", r=2), scored_round([[0, 1]], "b", r=5)
    out = concat_rounds([a, b], pad_token_id=0)
    assert out.batch["responses"].shape == (4, 5) and out.batch["input_ids"].shape == (4, P + 5)
    assert out.batch["response_mask"].sum(-1).tolist() == [2, 2, 5, 5]


def test_pad_responses_fills_named_keys():
    b = scored_round([[1, 0]], "p", r=2)
    b.batch["token_segments"] = torch.zeros(2, 2, dtype=torch.long)
    out = pad_responses(b, 3, pad_token_id=99, fill={"token_segments": -1})
    assert out.batch["token_segments"].tolist() == [[0, 0, -1]] * 2
    assert out.batch["token_level_scores"][:, -1].tolist() == [0.0, 0.0]


# ----------------------------------------------------------------- the trainer's stage, through its step
def scripted_trainer(script: list[list[list[float]]], train_batch_size: int, n: int, max_batches: int,
                     enable: bool = True):
    """A worker-less ``RayPPOTrainer`` whose ``gen`` stage returns rounds with the outcomes in ``script``
    (one list of group outcomes per call), whose reward stage keeps them, and whose model stages pass."""
    from verl.trainer.ppo.dynamic_sampling import group_accumulator_for
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    class Scripted(RayPPOTrainer):
        def stage_gen(self, batch, metrics):
            self.calls += 1
            return scored_round(script[self.calls - 1], f"c{self.calls}-")

        def stage_reward(self, batch, metrics):
            return batch  # scored_round already holds the scores

    for name in ("stage_old_log_prob", "stage_ref", "stage_values", "stage_adv", "stage_update_critic",
                 "stage_update_actor"):  # fmt: skip
        setattr(Scripted, name, lambda self, batch, metrics: batch)
    t = Scripted.__new__(Scripted)  # no workers, no data loaders: only what the step needs
    # core's full config (so keys the step reads have their defaults); balance_batch needs the worker
    # group's size, which a worker-less trainer has not
    t.config = load_config([
        f"algorithm.filter_groups.enable={enable}", "algorithm.filter_groups.metric=acc",
        f"algorithm.filter_groups.max_num_gen_batches={max_batches}", f"actor_rollout_ref.rollout.n={n}",
        f"data.train_batch_size={train_batch_size}", "trainer.balance_batch=false", "trainer.save_freq=-1",
    ])  # fmt: skip
    t.global_steps, t.total_training_steps, t.calls, t.val_reward_fn = 1, 10, 0, None
    t.group_accumulator = group_accumulator_for(t.config, pad_token_id=0)
    return t


def _prompts(k: int) -> DataProto:
    return DataProto.from_dict(tensors={"input_ids": torch.zeros(k, P, dtype=torch.long)})


def test_filter_stage_asks_for_more_prompts_until_the_batch_is_full():
    script = [[[0, 0], [1, 0]], [[1, 1], [0, 0]], [[0, 1], [1, 0]]]  # 1, 0, then 2 varied groups
    t = scripted_trainer(script, train_batch_size=2, n=2, max_batches=5)
    metrics: dict = {}
    assert t.train_step(_prompts(2), metrics, {}) is None
    assert t.train_step(_prompts(2), metrics, {}) is None
    out = t.train_step(_prompts(2), metrics, {})
    assert out.non_tensor_batch["uid"].tolist() == ["c1-1", "c1-1", "c3-0", "c3-0"]
    assert metrics["train/num_gen_batches"] == 3.0
    assert metrics["dynamic_sampling/kept_groups"] == 3.0 and metrics["dynamic_sampling/dropped_groups"] == 3.0
    assert metrics["dynamic_sampling/all_acc/mean"] == 5 / 12


def test_filter_stage_raises_after_max_rounds_and_is_a_no_op_when_disabled():
    t = scripted_trainer([[[0, 0]], [[1, 1]]], train_batch_size=1, n=2, max_batches=2)
    assert t.train_step(_prompts(1), {}, {}) is None
    with pytest.raises(DynamicSamplingError, match="max_num_gen_batches=2"):
        t.train_step(_prompts(1), {}, {})
    off = scripted_trainer([[[0, 0], [1, 1]]], train_batch_size=2, n=2, max_batches=1, enable=False)
    assert off.group_accumulator is None
    out = off.train_step(_prompts(2), {}, {})
    assert len(out) == 4  # all-equal groups are kept when filter_groups.enable is false
