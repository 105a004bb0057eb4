"""The default pipeline (what `python -m verl.trainer.main_ppo` with no arguments runs), for a few steps:
metrics, checkpoint, plot and the recorded config exist beside each other."""

import json

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_default_pipeline_few_steps(ray_cluster, tmp_path):
    from verl.trainer.demo import run

    summary = run(tmp_path, sft_steps=4, rl_steps=2, workers=2, extra_rl_args=["trainer.save_freq=2"])
    rl, sft = tmp_path / "rl", tmp_path / "sft"
    rows = [json.loads(line) for line in open(rl / "metrics.jsonl")]
    assert [r["step"] for r in rows if "critic/score/mean" in r] == [1, 2]
    assert [r["step"] for r in rows if "val/arithmetic/reward" in r] == [0, 2]
    assert tuple(summary["val_curve"][0]) == (0, rows[0]["val/arithmetic/reward"])
    assert (rl / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any((rl / "tensorboard").iterdir())
    # The RL checkpoint of the last step and the config it ran with, recorded beside the metrics.
    assert (rl / "global_step_2" / "actor").is_dir()
    assert (rl / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    cfg = yaml.safe_load((rl / "config.yaml").read_text())
    assert cfg["algorithm"]["adv_estimator"] == "grpo"
    assert cfg["actor_rollout_ref"]["model"]["path"] == str(sft / "global_step_4" / "huggingface")
    assert cfg["data"]["train_files"].endswith("train.parquet") and cfg["trainer"]["total_training_steps"] == 2
    # RL started from the SFT warm start's Hugging Face folder, which holds weights and tokenizer.
    assert (sft / "global_step_4" / "huggingface" / "model.safetensors").is_file()
    assert (sft / "global_step_4" / "huggingface" / "tokenizer_config.json").is_file()
    assert [json.loads(line)["step"] for line in open(sft / "metrics.jsonl")] == [1, 2, 3, 4]
    assert json.loads((tmp_path / "summary.json").read_text())["rl_steps"] == 2


def test_main_ppo_without_arguments_runs_the_default(monkeypatch):
    import verl.trainer.demo as demo
    from verl.trainer import main_ppo

    called = []
    monkeypatch.setattr(demo, "main", lambda argv: called.append(argv))
    main_ppo.main([])
    assert called == [[]]
