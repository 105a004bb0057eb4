"""Every example config under examples/ loads and validates (no GPU, no data needed)."""

import os
from pathlib import Path

import pytest
from verl.trainer.config import load_config, use_critic, validate_config
from verl.trainer.sft import load_sft_config, validate_sft_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RL = sorted(p for p in EXAMPLES.rglob("*.yaml") if "sft" not in p.parts)
SFT = sorted(EXAMPLES.glob("sft/*.yaml"))


def test_examples_exist():
    names = {p.relative_to(EXAMPLES).as_posix() for p in RL + SFT}
    assert {"gsm8k/ppo_qwen2.5_0.5b.yaml", "gsm8k/grpo_qwen2.5_0.5b.yaml", "math/grpo_qwen2.5_0.5b.yaml",
            "sft/gsm8k_sft_qwen2.5_0.5b.yaml"} <= names


@pytest.mark.parametrize("path", RL, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_rl_example_validates(path):
    cfg = load_config(["--config", str(path)])
    validate_config(cfg)
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert cfg.data.train_files.startswith(os.environ["HOME"])  # ${oc.env:HOME} resolved at load


def test_quickstart_settings():
    ppo = load_config(["--config", str(EXAMPLES / "gsm8k/ppo_qwen2.5_0.5b.yaml")])
    assert ppo.algorithm.adv_estimator == "gae" and use_critic(ppo)
    assert ppo.critic.model.path == ppo.actor_rollout_ref.model.path
    assert (ppo.data.train_batch_size, ppo.actor_rollout_ref.actor.ppo_mini_batch_size) == (256, 64)
    grpo = load_config(["--config", str(EXAMPLES / "gsm8k/grpo_qwen2.5_0.5b.yaml"), "trainer.n_gpus_per_node=8"])
    validate_config(grpo)
    assert grpo.algorithm.adv_estimator == "grpo" and not use_critic(grpo)
    assert grpo.actor_rollout_ref.actor.use_kl_loss and grpo.actor_rollout_ref.rollout.n == 5


@pytest.mark.parametrize("path", SFT, ids=lambda p: p.name)
def test_sft_example_validates(path):
    cfg = load_sft_config(["--config", str(path)])
    validate_sft_config(cfg)
    assert cfg.model.path == "Qwen/Qwen2.5-0.5B-Instruct"


def test_gsm8k_to_messages(tmp_path):
    import importlib.util

    from verl.utils.dataset.rows import read_rows, write_parquet
    from verl.utils.preprocess.gsm8k import convert

    spec = importlib.util.spec_from_file_location("gsm8k_to_messages", EXAMPLES / "sft/gsm8k_to_messages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rl_rows = convert([("x", {"question": "2+3?", "answer": "2+3=5\n#### 5"})], "train")
    write_parquet(rl_rows, tmp_path / "train.parquet")
    mod.main(["--input", str(tmp_path / "train.parquet"), "--output", str(tmp_path / "sft.parquet")])
    (_, row), = read_rows(tmp_path / "sft.parquet")
    assert row["messages"][-1] == {"role": "assistant", "content": "2+3=5\n#### 5"}
    assert row["messages"][0]["role"] == "user" and row["messages"][0]["content"].startswith("2+3?")
