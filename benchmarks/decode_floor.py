"""The native rollout's decode against its matmul floor, in CPU seconds of one thread.

    uv run python benchmarks/decode_floor.py --sizes s m --lengths 64 256 [--reps 3] [--dtype bf16] [--modes eager compiled]

Per (size, length): the benchmark's random-init Qwen2 (``grpo_step/assets.py`` sizes: s 4.2M, m 25M,
l 103M), 64 rows of 4-token prompts, ``native_generate`` with sampling at temperature 1 and rollout
log-probs, exactly ``length`` new tokens. The floor is the generation's counted matmul FLOPs
(``grpo_step/flops.generation_flops``: prefill, decode steps, LM head, attention) at the best rate of
a 1024x1024 ``mm`` in the model's dtype (``--dtype``: fp32, or bf16 weights and KV cache as a bf16
actor decodes) measured right before, both in CPU seconds of one torch thread (``time.process_time``),
so other jobs on a shared machine change them less than wall time. ``--modes``: the eager decode step
and/or the compiled one (``native_generate(compiled=True)``, what ``actor.use_torch_compile`` runs; its
first, compiling, generation is left out). Prints the best of ``--reps`` runs per mode: CPU seconds,
floor, their ratio, generated tokens per CPU second.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "grpo_step"))

from assets import SIZES  # noqa: E402
from flops import generation_flops  # noqa: E402

ROWS, PROMPT, VOCAB = 64, 4, 101


def mm_rate(n: int = 1024, reps: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Best FLOP/s (CPU time) of an n x n product in ``dtype``."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = 0.0
    for _ in range(reps):
        t0 = time.process_time()
        torch.mm(a, b)
        best = max(best, 2 * n**3 / max(time.process_time() - t0, 1e-9))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["s", "m"], choices=sorted(SIZES))
    ap.add_argument("--lengths", nargs="+", type=int, default=[64])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    args = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    torch.set_num_threads(1)
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.workers.rollout.hf_rollout import SamplingParams
    from verl.workers.rollout.native_rollout import native_generate

    print(f"dtype {args.dtype}; torch {torch.__version__}; CPU kernels {torch.backends.cpu.get_cpu_capability()}")
    print("| size | new tokens | mode | native CPU s | floor s | native/floor | tokens per CPU s | mm GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        cfg = Qwen2Config(
            vocab_size=VOCAB, max_position_embeddings=1024, tie_word_embeddings=True, **SIZES[size]
        )
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg).eval().to(dtype)
        ids = torch.randint(3, VOCAB, (ROWS, PROMPT))
        mask, pos = torch.ones_like(ids), torch.arange(PROMPT).expand(ROWS, -1).contiguous()
        for length in args.lengths:
            params = SamplingParams(response_length=length, do_sample=True)
            flop = generation_flops(SIZES[size], VOCAB, ROWS, PROMPT, length)
            for mode in args.modes:
                compiled = mode == "compiled"
                if compiled:  # the compile, paid once per run, stays out of the timed generations
                    native_generate(model, ids, mask, pos, params, [], 0, True, compiled=True)
                best = None
                for rep in range(args.reps):
                    rate = mm_rate(dtype=dtype)
                    t0 = time.process_time()
                    native_generate(
                        model, ids, mask, pos, params, [], 0, True, torch.Generator().manual_seed(rep),
                        compiled=compiled,
                    )
                    cpu = time.process_time() - t0
                    if best is None or cpu / (flop / rate) < best[0] / best[1]:
                        best = (cpu, flop / rate, rate)
                cpu, floor, rate = best
                print(
                    f"| {size} | {length} | {mode} | {cpu:.3f} | {floor:.3f} | {cpu / floor:.2f} | "
                    f"{ROWS * length / cpu:.0f} | {rate / 1e9:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
