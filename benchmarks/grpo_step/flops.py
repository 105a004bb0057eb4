"""The compute-limit reference: sustained fp32 matmul throughput, and the FLOPs a GRPO step needs.

``matmul_gflops`` times ``torch.mm`` of two n x n fp32 matrices (n = 2048 by default) with the
process's torch threads and returns the best and median GFLOP/s over ``reps`` products
(``2 n^3`` FLOPs each). ``step_flops`` counts the matrix-multiply FLOPs of one step of the benchmark
(linear layers, attention scores and values, the LM head where logits are needed); elementwise work,
norms and softmax are left out, as model-FLOPs utilisation usually does.

    uv run python benchmarks/grpo_step/flops.py --json   # prints the matmul reference
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def matmul_gflops(n: int = 2048, reps: int = 5, threads: int = 0, dtype: str = "fp32") -> dict[str, float]:
    """Best and median GFLOP/s of ``reps`` n x n products in ``dtype`` (fp32 or bf16; after one warm-up
    product)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
    out = torch.empty(n, n, dtype=dt)
    torch.mm(a, b, out=out)
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        rates.append(2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return {
        "n": n,
        "dtype": dtype,
        "threads": torch.get_num_threads(),
        "best_gflops": max(rates),
        "median_gflops": statistics.median(rates),
    }


def _per_token_linear(cfg: dict[str, int]) -> int:
    """Forward FLOPs of the transformer's linear layers for one token (no LM head)."""
    h, n_layers, i = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    head_dim = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * head_dim
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * i  # q, k+v, o, gate+up+down
    return 2 * n_layers * per_layer


def _attention(cfg: dict[str, int], contexts: int) -> int:
    """FLOPs of scores (QK^T) and weighted values (PV) summed over queries seeing ``contexts`` keys."""
    return 2 * 2 * cfg["num_hidden_layers"] * cfg["hidden_size"] * contexts


def forward_flops(cfg: dict[str, int], vocab: int, rows: int, prompt: int, new: int) -> int:
    """One forward over prompt + response with logits for the ``new`` response positions."""
    seq = prompt + new
    lin = _per_token_linear(cfg) * seq
    attn = _attention(cfg, seq * (seq + 1) // 2)
    head = 2 * cfg["hidden_size"] * vocab * new
    return rows * (lin + attn + head)


def generation_flops(cfg: dict[str, int], vocab: int, rows: int, prompt: int, new: int) -> int:
    """Prefill of the prompt, then ``new - 1`` one-token decode steps through the KV cache."""
    fed = prompt + new - 1  # the last sampled token is never fed back
    lin = _per_token_linear(cfg) * fed
    attn = _attention(cfg, fed * (fed + 1) // 2)
    head = 2 * cfg["hidden_size"] * vocab * new  # one next-token distribution per sampled token
    return rows * (lin + attn + head)


def step_flops(
    cfg: dict[str, int], vocab: int, rows: int, prompt: int, new: int, old_log_prob: bool = True
) -> dict[str, Any]:
    """FLOPs of one step: generation, the old-log-prob forward (if done), forward + backward (3x)."""
    gen = generation_flops(cfg, vocab, rows, prompt, new)
    fwd = forward_flops(cfg, vocab, rows, prompt, new)
    total = gen + (fwd if old_log_prob else 0) + 3 * fwd
    return {"gen": gen, "forward": fwd, "total": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--json", action="store_true", help="print one JSON line (for the harness)")
    args = ap.parse_args()
    r = matmul_gflops(args.n, args.reps, args.threads, args.dtype)
    print(
        json.dumps(r)
        if args.json
        else f"{args.dtype} matmul {args.n}x{args.n}, {r['threads']} threads: best {r['best_gflops']:.1f} GFLOP/s, "
        f"median {r['median_gflops']:.1f} GFLOP/s"
    )


if __name__ == "__main__":
    main()
