"""The engine benchmarks' pure parts: table rendering, layouts, the actor config, the batch, summaries.

uv run pytest benchmarks/test_engines_bench.py -q
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engines  # noqa: E402
import rollout_engines  # noqa: E402
from md_table import markdown_table, write_report  # noqa: E402


def test_markdown_table_rows_and_escaping():
    text = markdown_table(["a", "b"], [[1, "x|y"], ["2.50", "two\nlines"]])
    assert text == "| a | b |\n|---|---|\n| 1 | x\\|y |\n| 2.50 | two lines |\n"
    with pytest.raises(ValueError, match="row 1 has 1 cells for 2 columns"):
        markdown_table(["a", "b"], [[1, 2], [3]])


def test_write_report(tmp_path):
    out = tmp_path / "sub" / "t.md"
    write_report(out, "Title", ["note one", "note two"], "| a |\n|---|\n| 1 |\n")
    assert out.read_text() == "# Title\n\nnote one\nnote two\n\n| a |\n|---|\n| 1 |\n"


def test_layouts_and_refusals():
    assert engines.layouts(1) == [("fsdp2", "DP=1", 1), ("megatron", "TP=1", 1)]
    assert engines.layouts(2) == [("fsdp2", "DP=2", 1), ("megatron", "TP=2", 2)]
    with pytest.raises(ValueError, match="use 1 or 2"):
        engines.layouts(4)
    with pytest.raises(ValueError, match="no tensor parallelism"):
        engines.actor_overrides("/m", "fsdp2", 2, 64)
    with pytest.raises(ValueError, match="use fsdp2 or megatron"):
        engines.actor_overrides("/m", "fsdp", 1, 64)


def test_actor_config_is_read_as_built(tmp_path):
    from verl.trainer.config import load_config

    cfg = load_config(
        engines.actor_overrides(tmp_path, "megatron", 2, 32)).actor_rollout_ref
    assert cfg.model.path == str(tmp_path)
    assert cfg.actor.strategy == "megatron"
    assert cfg.actor.megatron.tensor_model_parallel_size == 2
    assert cfg.actor.ppo_mini_batch_size == 8 and cfg.actor.ppo_micro_batch_size_per_gpu == 32
    assert cfg.actor.optim.lr == pytest.approx(1e-3) and cfg.actor.use_rollout_log_probs
    fsdp = load_config(
        engines.actor_overrides(tmp_path, "fsdp2", 1, 64)).actor_rollout_ref
    assert fsdp.actor.strategy == "fsdp2" and fsdp.actor.megatron.tensor_model_parallel_size == 1


def test_batch_is_the_curves_task():
    from verl.workers.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = engines.assets.PLAIN_CHAT_TEMPLATE
    data = engines.make_batch(tok, new_tokens=5, seed=1)
    b = data.batch
    assert b["input_ids"].shape == (64, 4 + 5) and b["responses"].shape == (64, 5)
    prompts = [tok.decode(row) for row in b["prompts"][::8]]
    for text in prompts:  # "a+b=" with single digits, each prompt repeated for its 8 samples
        a, rest = text.split("+")
        assert rest.endswith("=") and 0 <= int(a) <= 9 and 0 <= int(rest[:-1]) <= 9
    assert (b["prompts"].view(8, 8, 4) == b["prompts"][::8, None]).all()
    assert not ((b["responses"] == tok.pad_token_id) | (b["responses"] == tok.eos_token_id)).any()
    assert b["attention_mask"].all() and (b["position_ids"][0] == __import__("torch").arange(9)).all()
    assert data.meta_info["rows_per_prompt"] == 8


def test_summarize_ratio_is_per_rep_median():
    rows = engines.summarize("m", 64, 2, 1, {"fsdp2": [1.0, 2.0, 4.0], "megatron": [3.0, 2.0, 2.0]})
    # per-rep ratios 3, 1, 0.5 -> median 1
    assert rows[0] == ["m", "64", "fsdp2", "DP=2", "2 x 1", "2.000", "1.000", "4.000", "1 (baseline)"]
    assert rows[1] == ["m", "64", "megatron", "TP=2", "2 x 1", "2.000", "2.000", "3.000", "1.00x"]
    skewed = engines.summarize("m", 64, 1, 2, {"fsdp2": [1.0, 1.0, 10.0], "megatron": [2.0, 3.0, 10.0]})
    assert skewed[1][-1] == "2.00x"  # ratios 2, 3, 1 -> 2 (the medians' ratio would be 3)


def test_rollout_sizes_and_head_dims():
    assert rollout_engines.model_source("xs", False) == "tiny"
    assert rollout_engines.model_source("m", False) == "assets"
    assert rollout_engines.model_source("xs", True) == "assets"
    with pytest.raises(ValueError, match="unknown size"):
        rollout_engines.model_source("xs32", True)  # a tiny size only
    dims = {s: rollout_engines.head_dim(s, "assets") for s in ("xs", "s", "m", "l")}
    assert dims == {"xs": 16, "s": 64, "m": 64, "l": 64}
    assert rollout_engines.head_dim("xs32", "tiny") == 32


def test_vllm_row_ratios_to_native():
    times = {"vllm": [2.0, 4.0], "native": [1.0, 1.0], "hf": [1.5, 2.5]}
    tokens = {k: [1024, 1024] for k in times}
    row = rollout_engines.vllm_row("m", 16, times, tokens, [0.1, 0.3])
    assert row == ["m", "16", "341", "1024", "512", "3.000", "1.000", "2.000", "3.00x", "2.00x", "0.200"]
    assert len(row) == len(rollout_engines.VLLM_COLUMNS)
