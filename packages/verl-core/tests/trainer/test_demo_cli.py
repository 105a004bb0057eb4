"""The demo's command line: the LoRA and learning-rate options reach the GRPO config (no run needed)."""

import pytest
from verl.trainer import demo


def test_lora_options_become_the_upstream_keys(monkeypatch):
    seen = {}

    def fake_run(*args, **kwargs):
        seen.update(kwargs)
        return {}

    monkeypatch.setattr(demo, "run", fake_run)
    demo.main(["--lora-rank", "16", "--lr", "1e-3"])
    assert seen["extra_rl_args"] == [
        "actor_rollout_ref.model.lora_rank=16",
        "actor_rollout_ref.model.lora_alpha=32",
    ]
    assert seen["lr"] == pytest.approx(1e-3)
    demo.main(["--lora-rank", "8", "--lora-alpha", "8"])
    assert seen["extra_rl_args"][1] == "actor_rollout_ref.model.lora_alpha=8"
    demo.main([])
    assert seen["extra_rl_args"] == [] and seen["lr"] == demo.DEFAULT_RL_LR
    demo.main(["--worker-backend", "local", "--workers", "1", "--lora-rank", "4"])
    assert seen["extra_rl_args"][0] == "trainer.worker_backend=local" and len(seen["extra_rl_args"]) == 3
    assert seen["extra_sft_args"] == ["trainer.worker_backend=local"]  # the SFT warm start runs in-process too


def test_the_device_reaches_both_stages(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(demo, "run", lambda *a, **kw: seen.update(kw) or {})
    demo.main(["--device", "cuda"])
    assert seen["device"] == "cuda"
    demo.main([])
    assert seen["device"] == "cpu"
    data = {"sft": "s.parquet", "train": "t.parquet", "test": "v.parquet"}
    assert "trainer.device=cuda" in demo.sft_args("/m", data, tmp_path, 3, 1, device="cuda")
    assert "trainer.device=cuda" in demo.rl_args("/m", data, tmp_path, 3, 1, device="cuda")
    assert "trainer.device=cpu" in demo.rl_args("/m", data, tmp_path, 3, 1)


def test_lora_alpha_without_a_rank_is_refused(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--lora-alpha", "32"])
    assert "--lora-alpha=32 needs --lora-rank > 0" in capsys.readouterr().err


def test_the_learning_rate_reaches_the_actor(tmp_path):
    data = {"train": "t.parquet", "test": "v.parquet"}
    args = demo.rl_args("/m", data, tmp_path, 3, 2, lr=2.5e-4)
    assert "actor_rollout_ref.actor.optim.lr=0.00025" in args
    assert f"actor_rollout_ref.actor.optim.lr={demo.DEFAULT_RL_LR}" in demo.rl_args(
        "/m", data, tmp_path, 3, 2
    )


def test_the_seed_reaches_both_stages(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(demo, "run", lambda *a, **kw: seen.update(kw) or {})
    demo.main(["--seed", "3"])
    assert seen["extra_sft_args"] == ["data.seed=3", "trainer.seed=3"]
    assert seen["extra_rl_args"] == ["data.seed=3", "trainer.seed=3"]
    demo.main([])
    assert seen["extra_sft_args"] == [] and seen["extra_rl_args"] == []
    # the SFT config loads with them (data order) as the RL config does
    from verl.trainer.sft import load_sft_config

    data = {"sft": "s.parquet", "train": "t.parquet", "test": "v.parquet"}
    cfg = load_sft_config(demo.sft_args("/m", data, tmp_path, 3, 2) + ["data.seed=3", "trainer.seed=3"])
    assert (cfg.data.seed, cfg.trainer.seed) == (3, 3)
