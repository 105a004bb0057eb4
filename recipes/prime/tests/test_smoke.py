"""CPU smoke tests: the recipe's default config end to end (assets, Ray workers, the PRM trained online,
tracker), colocated as in the default and on a pool of its own.

Only the warm start is shortened (the model then rarely answers right; the filter fills the batch with
failing groups) and the steps are few; learning is shown by the README's measured run.
"""

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _run(tmp_path, monkeypatch, *overrides):
    from verl_recipe_prime import cpu_assets
    from verl_recipe_prime.main_prime import RECIPE

    monkeypatch.setattr(cpu_assets, "WARM_START_STEPS", 20)
    out = tmp_path / "run"
    metrics = RECIPE.train([f"trainer.default_local_dir={out}", *overrides])
    return metrics, out


def test_cpu_default_runs_end_to_end(ray_cluster, tmp_path, monkeypatch):
    metrics, out = _run(tmp_path, monkeypatch, "trainer.total_training_steps=2", "trainer.test_freq=2",
                        "trainer.save_freq=2")  # fmt: skip
    assert metrics["training/global_step"] == 2
    assert metrics["prime/groups"] == 64.0  # 16 prompts x oversample 4 generated, 16 kept
    assert metrics["perf/total_num_tokens"] > 0 and metrics["response_length/max"] <= 8
    for key in ("reward_model/dpo_loss", "reward_model/dpo_acc", "reward_model/grad_norm", "rm/lr"):
        assert key in metrics, key
    assert 0.0 <= metrics["val-prm/pair_acc"] <= 1.0 and "val/arithmetic/reward" in metrics
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward_model/dpo_loss" in r] == [1, 2]
    assert (out / "reward_curve.png").is_file()
    # the PRM's state is part of the trainer's checkpoint, next to the actor's
    ckpt = out / "global_step_2"
    assert (ckpt / "reward" / "checkpoint_meta.json").is_file() and (
        ckpt / "actor" / "checkpoint_meta.json"
    ).is_file()


def test_prm_on_its_own_pool_and_resume(ray_cluster, tmp_path, monkeypatch):
    pool = ["reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1", "trainer.val_before_train=false", "trainer.test_freq=-1",
            "trainer.save_freq=1", "trainer.resume_mode=auto"]  # fmt: skip
    metrics, out = _run(tmp_path, monkeypatch, "trainer.total_training_steps=1", *pool)
    assert metrics["training/global_step"] == 1 and "reward_model/dpo_loss" in metrics
    # resume: step 2 continues from global_step_1 (actor and PRM loaded) on the separate pool
    metrics, _ = _run(tmp_path, monkeypatch, "trainer.total_training_steps=2", *pool)
    assert metrics["training/global_step"] == 2 and (out / "global_step_2" / "reward").is_dir()
    assert metrics["rm/lr"] > 0
