"""The recipe's two configs: the paper's numbers, the CPU default, and the overlong penalty they produce
through the reward manager the recipe builds from them."""

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo.reward import load_reward_manager as build_reward_fn
from verl_recipe_dapo.main_dapo import CPU_CONFIG, PAPER_CONFIG, RECIPE


def test_paper_config_holds_the_papers_setting():
    c = RECIPE.load_file(PAPER_CONFIG)
    a, r = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert c.actor_rollout_ref.model.path == "Qwen/Qwen2.5-32B"
    assert (c.data.train_batch_size, c.data.gen_batch_size, r.n, a.ppo_mini_batch_size) == (512, 1536, 16, 32)
    assert (c.data.max_response_length, r.response_length) == (20480, 20480)
    assert (a.clip_ratio_low, a.clip_ratio_high, a.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert not a.use_kl_loss and not c.algorithm.use_kl_in_reward
    ob = c.reward.overlong_buffer
    assert c.reward.reward_manager == "dapo" and (ob.enable, ob.len, ob.penalty_factor) == (True, 4096, 1.0)
    fg = c.algorithm.filter_groups
    assert (fg.enable, fg.metric) == (True, "acc") and c.algorithm.adv_estimator == "grpo"


def test_paper_config_validates_apart_from_the_missing_gpu(fails_only_for_the_gpu):
    # sizes divide over 16 x 8 workers etc.
    fails_only_for_the_gpu(validate_config, RECIPE.load_file(PAPER_CONFIG, overrides=["trainer.device=cpu"]))


def test_no_config_flag_means_the_cpu_default():
    argv = RECIPE.with_default_config(["trainer.total_training_steps=2"])
    assert argv[:2] == ["--config", str(RECIPE.configs_dir / CPU_CONFIG)]
    assert RECIPE.with_default_config(["--config", "x.yaml"]) == ["--config", "x.yaml"]
    c = load_config(argv)
    assert c.trainer.device == "cpu" and c.algorithm.filter_groups.enable
    assert c.data.gen_batch_size > c.data.train_batch_size
    assert c.actor_rollout_ref.model.path is None and c.data.train_files is None  # assets are built


def _responses(tok, texts: list[str], lengths: list[int], data_source: str, truth: str) -> DataProto:
    """Rows whose response is ``text`` left-filled with spaces to exactly ``length`` tokens."""
    r = max(lengths)
    ids = torch.full((len(texts), r), tok.pad_token_id)
    mask = torch.zeros((len(texts), r), dtype=torch.long)
    for i, (text, n) in enumerate(zip(texts, lengths)):
        toks = tok(text, add_special_tokens=False)["input_ids"]
        row = [tok(" ", add_special_tokens=False)["input_ids"][0]] * (n - len(toks)) + toks
        assert len(row) == n
        ids[i, :n] = torch.tensor(row)
        mask[i, :n] = 1
    k = len(texts)
    return DataProto.from_dict(
        tensors={"responses": ids, "response_mask": mask},
        non_tensors={
            "data_source": np.array([data_source] * k, dtype=object),
            "reward_model": np.array([{"ground_truth": truth}] * k, dtype=object),
        },
    )


@pytest.fixture(scope="module")
def char_tok():
    from verl.workers.tiny import build_char_tokenizer

    return build_char_tokenizer()


def test_overlong_penalty_of_the_cpu_config(char_tok):
    cfg = load_config(RECIPE.with_default_config([]))  # max_response_length 8, buffer 4, factor 1
    fn = build_reward_fn(cfg, char_tok, num_examine=0)
    lengths = [1, 4, 5, 6, 8]
    out = fn(_responses(char_tok, ["7"] * 5, lengths, "arithmetic", "7"), return_dict=True)
    # hand values: penalty = min(-(L - (8 - 4)) / 4 * 1.0, 0); the exact-match score is 1 for every row
    expected = [1.0, 1.0, 1.0 - 0.25, 1.0 - 0.5, 1.0 - 1.0]
    got = [out["reward_tensor"][i, n - 1].item() for i, n in enumerate(lengths)]
    assert got == pytest.approx(expected)
    assert out["reward_tensor"].sum().item() == pytest.approx(sum(expected))  # nothing off the last token
    assert out["reward_extra_info"]["overlong_reward"] == pytest.approx([0, 0, -0.25, -0.5, -1.0])
    assert out["reward_extra_info"]["score"] == [1.0] * 5  # the filter metric is the unpenalized score


def test_overlong_penalty_of_the_paper_config(char_tok):
    cfg = RECIPE.load_file(PAPER_CONFIG)  # max_response_length 20480, buffer 4096, factor 1; math_dapo scores +1 / -1
    fn = build_reward_fn(cfg, char_tok, num_examine=0)
    lengths = [16384, 18432, 20480, 20480]
    texts = ["Answer: 42", "Answer: 42", "Answer: 42", "Answer: 41"]
    out = fn(_responses(char_tok, texts, lengths, "math_dapo", "42"), return_dict=True)
    expected = [1.0, 1.0 - 0.5, 1.0 - 1.0, -1.0 - 1.0]
    got = [out["reward_tensor"][i, n - 1].item() for i, n in enumerate(lengths)]
    assert got == pytest.approx(expected)
    assert out["reward_extra_info"]["acc"] == [True, True, True, False]
