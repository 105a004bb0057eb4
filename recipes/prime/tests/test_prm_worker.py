"""The implicit PRM worker in this process (one gloo rank, the real FSDP2/FSDP engines, a tiny Qwen2):
what it scores before training, that training on outcome labels separates right from wrong answers while
the reference stays frozen, that micro-batching does not change an update, and its checkpoint."""

import math

import pytest
import torch
from verl_recipe_prime.config import load_prime_config
from verl_recipe_prime.prm_worker import PRIMERewardModelWorker, prm_mini_batch_size_per_rank


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    from verl.workers.tiny import build_tiny_qwen2

    path = tmp_path_factory.mktemp("prm_tiny")
    build_tiny_qwen2(path, size="xs", seed=0)
    return str(path)


def _cfg(model: str, *overrides: str):
    return load_prime_config([
        f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4", "trainer.device=cpu",
        "reward.reward_model.micro_batch_size_per_gpu=4", "reward.reward_model.mini_batch_size=8",
        "reward.reward_model.model.beta_train=0.5", "reward.reward_model.model.optim.lr=0.02", *overrides,
    ])  # fmt: skip


def _worker(model: str, *overrides: str) -> PRIMERewardModelWorker:
    w = PRIMERewardModelWorker(_cfg(model, *overrides).reward.reward_model, total_training_steps=20)
    w.init_model()
    return w


def _batch(acc: list[float], seed: int = 0):
    from verl.workers.engine.testing import make_rl_batch

    data = make_rl_batch(n=len(acc), prompt_len=5, response_len=4, vocab=101, seed=seed)
    data.batch["acc"] = torch.tensor(acc)
    return data


LABELS = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]


def _seq(q: torch.Tensor, data) -> torch.Tensor:
    return (q * data.batch["response_mask"]).sum(-1)


def test_mini_batch_per_rank_is_derived_and_checked():
    assert prm_mini_batch_size_per_rank(64, 2) == 32
    with pytest.raises(
        ValueError, match="mini_batch_size=6 trajectories must be a positive multiple of the 4"
    ):
        prm_mini_batch_size_per_rank(6, 4)


def test_untrained_prm_is_its_reference_and_the_first_loss_is_ln2(tiny_model):
    w = _worker(tiny_model)
    data = _batch(LABELS)
    q = w.compute_rm_score(data).batch["prm_log_ratio"]
    assert q.shape == (8, 4) and torch.equal(q, torch.zeros(8, 4))  # same weights: log-ratio exactly 0
    out = w.update_rm(data)
    # update=after semantics: the rows were scored in the training forward, before the step
    assert torch.equal(out.batch["prm_log_ratio"], torch.zeros(8, 4))
    m = out.meta_info["metrics"]
    assert m["reward_model/dpo_loss"] == pytest.approx(math.log(2), rel=1e-6)  # BCE(sigmoid(0), y) = ln 2
    assert m["rm/lr"] == pytest.approx(0.02) and m["reward_model/grad_norm"] > 0


def test_training_on_outcome_labels_separates_right_from_wrong(tiny_model):
    w = _worker(tiny_model)
    data = _batch(LABELS)
    ref_before = w.prm._log_probs(data, w.prm.ref_engine)
    losses = [w.update_rm(data).meta_info["metrics"]["reward_model/dpo_loss"] for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0]
    seq = _seq(w.compute_rm_score(data).batch["prm_log_ratio"], data)
    right, wrong = seq[torch.tensor(LABELS) == 1], seq[torch.tensor(LABELS) == 0]
    assert right.min() > 0 > wrong.max()  # every answer classified by the sign of its implicit reward
    torch.testing.assert_close(w.prm._log_probs(data, w.prm.ref_engine), ref_before, rtol=0, atol=0)  # frozen


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_an_update_does_not_depend_on_the_micro_batch_size(tiny_model, strategy):
    data = _batch(LABELS, seed=3)
    scores = []
    for micro in (1, 8):
        w = _worker(tiny_model, f"reward.reward_model.micro_batch_size_per_gpu={micro}",
                    f"reward.reward_model.strategy={strategy}")  # fmt: skip
        w.update_rm(data)
        scores.append(w.compute_rm_score(data).batch["prm_log_ratio"])
    assert scores[0].abs().max() > 1e-3  # the update moved the PRM ...
    torch.testing.assert_close(scores[0], scores[1], rtol=1e-4, atol=1e-5)  # ... the same way


def test_two_mini_batches_make_two_optimizer_steps(tiny_model):
    data = _batch(LABELS)
    one = _worker(tiny_model)  # mini_batch_size 8: one step
    two = _worker(tiny_model, "reward.reward_model.mini_batch_size=4")
    m = two.update_rm(data).meta_info["metrics"]
    one.update_rm(data)
    # the second mini-batch was scored after the first step: its loss is no longer ln 2, the first's is
    assert m["reward_model/dpo_loss"] != pytest.approx(math.log(2), rel=1e-6)
    assert not torch.allclose(
        one.compute_rm_score(data).batch["prm_log_ratio"], two.compute_rm_score(data).batch["prm_log_ratio"]
    )


def test_checkpoint_round_trip_restores_prm_and_optimizer(tiny_model, tmp_path):
    data = _batch(LABELS)
    a = _worker(tiny_model)
    for _ in range(2):
        a.update_rm(data)
    a.save_checkpoint(str(tmp_path / "reward"), global_step=2)
    b = _worker(tiny_model)
    b.load_checkpoint(str(tmp_path / "reward"))
    torch.testing.assert_close(
        b.compute_rm_score(data).batch["prm_log_ratio"], a.compute_rm_score(data).batch["prm_log_ratio"]
    )
    # optimizer moments and LR schedule came back too: the next update is the same
    a.update_rm(data)
    b.update_rm(data)
    torch.testing.assert_close(
        b.compute_rm_score(data).batch["prm_log_ratio"], a.compute_rm_score(data).batch["prm_log_ratio"]
    )


def test_labels_outside_zero_one_and_partial_mini_batches_are_refused(tiny_model):
    w = _worker(tiny_model)
    with pytest.raises(ValueError, match=r"outcome labels in \[0, 1\]; got \[-1.0, 2.0\]"):
        w.update_rm(_batch([1.0, 2.0, 0.0, -1.0, 0.0, 1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="6 rows, not a multiple of its mini-batch of 8"):
        w.update_rm(_batch(LABELS[:6]))
