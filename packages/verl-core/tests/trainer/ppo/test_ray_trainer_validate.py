"""RayPPOTrainer.validate reports upstream's val-core / val-aux metrics, computed per prompt from the
scores the reward function gave (checked against an independent computation with the same seed)."""

import math

import numpy as np
import pytest

from . import bandit_workers as bw
from .test_ray_trainer import bandit_config, make_trainer


def _loop_best(values, k, seed=42):
    idx = np.random.RandomState(seed).choice(len(values), size=(1000, k), replace=True)
    return sum(max(values[i] for i in row) for row in idx) / 1000


@pytest.mark.slow
def test_validate_reports_upstream_metric_names_from_the_per_prompt_groups(ray_cluster, tmp_path):
    cfg = bandit_config(tmp_path, "algorithm.adv_estimator=grpo", "trainer.total_epochs=1", "trainer.val_only=true",
                        "actor_rollout_ref.rollout.val_kwargs.n=4", "actor_rollout_ref.rollout.val_kwargs.do_sample=true")
    trainer = make_trainer(cfg, n_train=8, n_val=6)
    seen = []

    def recording_reward(data, return_dict=False):
        out = bw.bandit_reward_fn(data, return_dict=True)
        seen.append((list(data.non_tensor_batch["uid"]), out["reward_extra_info"]["acc"]))
        return out

    trainer.val_reward_fn = recording_reward
    metrics = trainer.fit()  # val_before_train + val_only: one validation pass

    uids = [u for batch_uids, _ in seen for u in batch_uids]
    acc = [a for _, batch_acc in seen for a in batch_acc]
    groups = {}
    for u, a in zip(uids, acc):
        groups.setdefault(u, []).append(a)
    # 6 prompts, each repeated val_kwargs.n = 4 times under one uid
    assert len(groups) == 6 and all(len(v) == 4 for v in groups.values())

    mean4 = sum(sum(v) / 4 for v in groups.values()) / 6
    assert metrics["val-core/bandit/acc/mean@4"] == pytest.approx(mean4)
    assert metrics["val-aux/bandit/reward/mean@4"] == pytest.approx(mean4)  # the score is the 0/1 acc here
    assert metrics["val/bandit/reward"] == pytest.approx(mean4)  # our alias, read by the bar and the plot
    std4 = sum(math.sqrt(sum((a - sum(v) / 4) ** 2 for a in v) / 4) for v in groups.values()) / 6
    assert metrics["val-aux/bandit/acc/std@4"] == pytest.approx(std4)
    for k, section in ((2, "val-aux"), (4, "val-core")):
        want = sum(_loop_best(v, k) for v in groups.values()) / 6
        assert metrics[f"{section}/bandit/acc/best@{k}/mean"] == pytest.approx(want, abs=1e-12)
    assert "val-aux/bandit/acc/worst@4/mean" in metrics and not any("maj@" in k for k in metrics)  # no pred
