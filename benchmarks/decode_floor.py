"""The native rollout's decode against its matmul floor, in CPU seconds of one thread.

    uv run python benchmarks/decode_floor.py --sizes s m --lengths 64 256 [--reps 3]

Per (size, length): the benchmark's random-init Qwen2 (``grpo_step/assets.py`` sizes: s 4.2M, m 25M,
l 103M), 64 rows of 4-token prompts, ``native_generate`` with sampling at temperature 1 and rollout
log-probs, exactly ``length`` new tokens. The floor is the generation's counted matmul FLOPs
(``grpo_step/flops.generation_flops``: prefill, decode steps, LM head, attention) at the best rate of
a 1024x1024 fp32 ``mm`` measured right before, both in CPU seconds of one torch thread
(``time.process_time``), so other jobs on a shared machine change them less than wall time.
Prints the best of ``--reps`` runs: CPU seconds, floor, their ratio, generated tokens per CPU second.
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


def mm_rate(n: int = 1024, reps: int = 5) -> float:
    """Best FLOP/s (CPU time) of an n x n fp32 product."""
    a, b = torch.randn(n, n), torch.randn(n, n)
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
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.workers.rollout.hf_rollout import SamplingParams
    from verl.workers.rollout.native_rollout import native_generate

    print("| size | new tokens | native CPU s | floor s | native/floor | tokens per CPU s | mm GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        cfg = Qwen2Config(
            vocab_size=VOCAB, max_position_embeddings=1024, tie_word_embeddings=True, **SIZES[size]
        )
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg).eval()
        ids = torch.randint(3, VOCAB, (ROWS, PROMPT))
        mask, pos = torch.ones_like(ids), torch.arange(PROMPT).expand(ROWS, -1).contiguous()
        for length in args.lengths:
            params = SamplingParams(response_length=length, do_sample=True)
            flop = generation_flops(SIZES[size], VOCAB, ROWS, PROMPT, length)
            best = None
            for rep in range(args.reps):
                rate = mm_rate()
                t0 = time.process_time()
                native_generate(
                    model, ids, mask, pos, params, [], 0, True, torch.Generator().manual_seed(rep)
                )
                cpu = time.process_time() - t0
                if best is None or cpu / (flop / rate) < best[0] / best[1]:
                    best = (cpu, flop / rate, rate)
            cpu, floor, rate = best
            print(
                f"| {size} | {length} | {cpu:.3f} | {floor:.3f} | {cpu / floor:.2f} | "
                f"{ROWS * length / cpu:.0f} | {rate / 1e9:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
