"""Rollout correction: truncated IS weights against hand-computed values, the config checks, and the
trainer stage that puts the weights into the batch the actor's loss reads."""

import math

import pytest
import torch
from verl import DataProto
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.rollout_corr_helper import (
    compute_rollout_correction_and_add_to_batch,
    compute_rollout_correction_weights,
)

# Two rows of three tokens; the last token of row 1 is padding.
RATIOS = torch.tensor([[0.5, 1.0, 3.0], [1.5, 1.2, 7.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_token_level_weights_are_the_ratios_truncated_at_the_threshold():
    w, m = compute_rollout_correction_weights(RATIOS.log(), MASK, "token", 2.0)
    # min(ratio, 2) on valid tokens, 0 on padding (the 7.0 is padding, not truncated but zeroed)
    torch.testing.assert_close(w, torch.tensor([[0.5, 1.0, 2.0], [1.5, 1.2, 0.0]]))
    assert not w.requires_grad
    mean = (0.5 + 1.0 + 2.0 + 1.5 + 1.2) / 5
    assert m["rollout_is_mean"] == pytest.approx(mean)
    assert m["rollout_is_max"] == pytest.approx(2.0) and m["rollout_is_min"] == pytest.approx(0.5)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)  # only the 3.0
    second = sum((x / mean) ** 2 for x in (0.5, 1.0, 2.0, 1.5, 1.2)) / 5
    assert m["rollout_is_eff_sample_size"] == pytest.approx(1 / second, rel=1e-5)


def test_sequence_level_weight_is_the_truncated_product_of_the_rows_ratios():
    w, m = compute_rollout_correction_weights(RATIOS.log(), MASK, "sequence", 2.0)
    # row 0: 0.5 * 1.0 * 3.0 = 1.5; row 1: 1.5 * 1.2 = 1.8 (padding's 7.0 excluded); both under 2
    torch.testing.assert_close(w, torch.tensor([[1.5, 1.5, 1.5], [1.8, 1.8, 0.0]]))
    w, m = compute_rollout_correction_weights(RATIOS.log(), MASK, "sequence", 1.6)
    torch.testing.assert_close(w, torch.tensor([[1.5, 1.5, 1.5], [1.6, 1.6, 0.0]]))
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(0.5)  # one sequence of two


def test_batch_normalisation_divides_by_the_mean_weight():
    w, m = compute_rollout_correction_weights(
        RATIOS.log(), MASK, "token", 2.0, rollout_is_batch_normalize=True
    )
    mean = (0.5 + 1.0 + 2.0 + 1.5 + 1.2) / 5
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(mean)
    torch.testing.assert_close(w, torch.tensor([[0.5, 1.0, 2.0], [1.5, 1.2, 0.0]]) / mean)
    # sequence level: the mean over sequences (1.5 and 1.8), not over tokens
    w, m = compute_rollout_correction_weights(
        RATIOS.log(), MASK, "sequence", 2.0, rollout_is_batch_normalize=True
    )
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(1.65)
    torch.testing.assert_close(w[:, 0], torch.tensor([1.5, 1.8]) / 1.65)


def test_huge_log_ratios_do_not_overflow():
    w, _ = compute_rollout_correction_weights(torch.full((1, 50), 5.0), torch.ones(1, 50), "sequence", 3.0)
    assert torch.isfinite(w).all() and float(w.max()) == 3.0


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="rollout_is='tok'"):
        compute_rollout_correction_weights(RATIOS.log(), MASK, "tok", 2.0)
    with pytest.raises(ValueError, match="positive"):
        compute_rollout_correction_weights(RATIOS.log(), MASK, "token", 0.0)
    with pytest.raises(ValueError, match="no valid token"):
        compute_rollout_correction_weights(RATIOS.log(), torch.zeros_like(MASK), "token", 2.0)


def _cfg(*overrides):
    return load_config(
        [
            "data.train_files=x.parquet",
            "actor_rollout_ref.model.path=m",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "trainer.n_gpus_per_node=1",
            "trainer.device=cpu",
            *overrides,
        ]
    )


def test_config_keys_have_upstream_defaults_and_bad_values_are_refused():
    rc = _cfg().algorithm.rollout_correction
    assert (
        rc.rollout_is,
        rc.rollout_is_threshold,
        rc.rollout_rs,
        rc.rollout_rs_threshold,
        rc.bypass_mode,
        rc.loss_type,
        rc.rollout_is_batch_normalize,
    ) == (None, 2.0, None, None, False, "ppo_clip", False)
    cfg = _cfg(
        "algorithm.rollout_correction.rollout_is=tokens",
        "algorithm.rollout_correction.rollout_rs=token_k1",
        "algorithm.rollout_correction.loss_type=reinforce",
        "algorithm.rollout_correction.rollout_is_threshold=0",
    )
    with pytest.raises(ConfigError) as e:
        validate_config(cfg)
    text = str(e.value)
    for needle in (
        "rollout_is='tokens'",
        "rejection sampling is not implemented",
        "loss_type='reinforce'",
        "rollout_is_threshold=0",
        "calculate_log_probs=false",
    ):
        assert needle in text, text


class _ActorGroup:
    """Stands in for the actor's worker group: the old policy's log-probs of the sampled tokens."""

    def __init__(self, old_log_probs):
        self.old_log_probs = old_log_probs

    def compute_log_prob(self, batch):
        return DataProto.from_dict(tensors={"old_log_probs": self.old_log_probs})


def _stage_trainer(*overrides):
    cfg = _cfg("actor_rollout_ref.rollout.calculate_log_probs=true", *overrides)
    validate_config(cfg)
    trainer = RayPPOTrainer.__new__(RayPPOTrainer)  # one stage needs only the config and the actor group
    trainer.config = cfg
    return trainer


def _batch():
    rollout_lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.0, -4.0]])
    return DataProto.from_dict(
        tensors={
            "rollout_log_probs": rollout_lp,
            "response_mask": MASK.clone(),
            "responses": torch.zeros(2, 3, dtype=torch.long),
        }
    ), rollout_lp


def test_old_log_prob_stage_adds_truncated_weights_that_scale_the_policy_loss():
    trainer = _stage_trainer("algorithm.rollout_correction.rollout_is=token")
    batch, rollout_lp = _batch()
    old = rollout_lp + RATIOS.log()  # pi_old / pi_rollout = RATIOS
    trainer.actor_rollout_wg = _ActorGroup(old)
    metrics = {}
    out = trainer.stage_old_log_prob(batch, metrics)
    torch.testing.assert_close(
        out.batch["rollout_is_weights"], torch.tensor([[0.5, 1.0, 2.0], [1.5, 1.2, 0.0]])
    )
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(6.2 / 5)
    # the loss the actor computes with these weights: token-mean of -A * ratio * w (ratio 1 at the old policy)
    adv = torch.ones(2, 3)
    loss, _ = core_algos.compute_policy_loss_vanilla(
        old, old, adv, MASK, "token-mean", rollout_is_weights=out.batch["rollout_is_weights"]
    )
    assert float(loss) == pytest.approx(-6.2 / 5)


def test_bypass_mode_uses_the_rollout_log_probs_and_adds_no_weights():
    trainer = _stage_trainer("algorithm.rollout_correction.bypass_mode=true")
    batch, rollout_lp = _batch()
    trainer.actor_rollout_wg = None  # no forward pass may happen
    out = trainer.stage_old_log_prob(batch, {})
    assert torch.equal(out.batch["old_log_probs"], rollout_lp) and "rollout_is_weights" not in out.batch


def test_without_rollout_is_the_batch_is_unchanged():
    trainer = _stage_trainer()
    batch, rollout_lp = _batch()
    trainer.actor_rollout_wg = _ActorGroup(rollout_lp)
    out = trainer.stage_old_log_prob(batch, {})
    assert "rollout_is_weights" not in out.batch
    batch, _ = _batch()
    batch.batch.pop("rollout_log_probs")
    cfg = _stage_trainer("algorithm.rollout_correction.rollout_is=token").config
    with pytest.raises(KeyError, match="rollout_log_probs"):
        compute_rollout_correction_and_add_to_batch(batch, cfg.algorithm.rollout_correction)
    assert math.isclose(cfg.algorithm.rollout_correction.rollout_is_threshold, 2.0)
