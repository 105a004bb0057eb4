"""Smoke test of ``benchmarks/grpo_step``: one tiny round of our step and the bare step, table produced.

No timings are asserted; the test checks that both steps ran the configured work (64 completions of
exactly the asked length), that the table row is printed, and that the FLOP count the MFU column uses
agrees with the parameter count of a real model.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .by_path import load_module

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "grpo_step"


def _load(name: str):
    return load_module(BENCH / f"{name}.py", f"grpo_step_{name}")


def test_step_flops_match_parameter_count():
    """Linear-layer FLOPs per token = 2 x the transformer's nn.Linear weights (+ LM head per logit)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    flops = _load("flops")
    sizes = _load("assets").SIZES
    for size, arch in sizes.items():
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=101, tie_word_embeddings=True, **arch))
        linear = sum(
            m.weight.numel()
            for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n != "lm_head"
        )
        h, layers = arch["hidden_size"], arch["num_hidden_layers"]
        rows, prompt, new = 3, 4, 5
        seq = prompt + new
        # by hand: linear + attention (QK^T and PV, 2*h*c FLOPs each per query) + LM head on `new` positions
        attn = sum(4 * layers * h * c for c in range(1, seq + 1))
        expected_fwd = rows * (2 * linear * seq + attn + 2 * h * 101 * new)
        got = flops.step_flops(arch, 101, rows, prompt, new)
        assert got["forward"] == expected_fwd, size
        assert got["total"] == got["gen"] + 4 * expected_fwd
        assert (
            flops.step_flops(arch, 101, rows, prompt, new, old_log_prob=False)["total"]
            == got["gen"] + 3 * expected_fwd
        )


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_one_round_of_ours_and_bare(tmp_path, dtype):
    """One eager round in each precision (compiling would take minutes here: ``--ours-compile false``)."""
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(BENCH / "run.py"),
        "--sizes",
        "xs",
        "--lengths",
        "4",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--worker-threads",
        "1",
        "--threads",
        "1",
        "--assets",
        str(tmp_path / "assets"),
        "--before",
        "none",
        "--out",
        str(out),
        "--trl-python",
        "none",
        "--ours-compile",
        "false",
        "--dtype",
        dtype,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| xs | 0.138M | 4 | 1 |")]
    assert rows, proc.stdout[-3000:]
    cells = rows[-1].split("|")[1:-1]
    assert len(cells) == 19
    assert cells[5].strip() == "-" and cells[7].strip() == "-" and cells[10].strip() == "-"  # no ours_before, no TRL
    assert float(cells[4]) > 0 and float(cells[6]) > 0
    assert float(cells[17].split("/")[0]) > 0  # union peak of ours
    cell = json.loads((out / "xs_L4.json").read_text())
    ours, bare = cell["records"]["ours"], cell["records"]["bare"]
    assert len(ours) == 1 and len(bare) == 1
    assert ours[0]["response_length/mean"] == 4.0  # ignore_eos: every completion has exactly 4 tokens
    assert bare[0]["gen_tokens"] == 64 * 4
    assert ours[0]["timing_s/gen"] > 0 and ours[0]["timing_s/update_actor"] > 0
    assert ours[0]["cpu_s"] > 0 and bare[0]["cpu_s"] > 0
    assert cell["ours_rss"]["worker_peak_mib"] > 0 and cell["ours_workers"][0]["threads"] == 1
    # main table, per-stage table, fastest-round table, first-round table, CPU-seconds table
    table = (out / "table.md").read_text()
    assert table.count("| xs |") == 5
    # the setup lines: processor, the one torch build of ours and bare, the precision each side computed in
    assert table.startswith("Processor: ") and ", the same for ours, bare." in table
    compute = {"fp32": "float32", "bf16": "bfloat16"}[dtype]
    assert cell["dtype"] == dtype and cell["ours_workers"][0]["compute_dtype"] == compute
    assert cell["ours_workers"][0]["compile"] == "use_torch_compile=false"
    assert bare[0]["matmul_dtypes"] == {"gen": [compute], "update": [compute]}
