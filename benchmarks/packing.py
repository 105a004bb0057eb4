"""Sequence packing (``model.use_remove_padding``): padded vs packed forward and forward+backward.

    uv run python benchmarks/packing.py [--sizes xs s] [--reps 5]

A GRPO-shaped micro-batch: 64 rows, prompts of 14-20 tokens left-padded, responses of uniformly
random length 1..R (R = 16 and 64) right-padded, a random-init tiny Qwen2 (``verl.workers.tiny``).
Times ``response_outputs`` (log-probs + entropy, as the actor's update runs it) with and without
``remove_padding``, alternating which goes first; prints medians and the speed-up.

Measured 2026-11-22 00:05 UTC on the shared 2-core VM, ``OMP_NUM_THREADS=1``, ``--reps 3``:

| size | R | real/padded tokens | pass | padded s | packed s | speed-up |
|---|---|---|---|---|---|---|
| xs | 16 | 0.71 | fwd (log-prob) | 0.012 | 0.013 | 0.91x |
| xs | 16 | 0.71 | fwd+bwd (update) | 0.037 | 0.035 | 1.03x |
| xs | 64 | 0.55 | fwd (log-prob) | 0.033 | 0.021 | 1.59x |
| xs | 64 | 0.55 | fwd+bwd (update) | 0.099 | 0.064 | 1.55x |
| s | 16 | 0.71 | fwd (log-prob) | 0.184 | 0.144 | 1.22x |
| s | 16 | 0.71 | fwd+bwd (update) | 0.570 | 0.443 | 1.13x |
| s | 64 | 0.55 | fwd (log-prob) | 0.441 | 0.268 | 1.64x |
| s | 64 | 0.55 | fwd+bwd (update) | 1.367 | 0.830 | 1.62x |
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def rl_batch(rows: int, resp_len: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = 20
    ids = torch.zeros((rows, p + resp_len), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i in range(rows):
        lp = int(torch.randint(14, p + 1, (1,), generator=g))
        lr = int(torch.randint(1, resp_len + 1, (1,), generator=g))
        ids[i, p - lp : p + lr] = torch.randint(5, vocab, (lp + lr,), generator=g)
        mask[i, p - lp : p + lr] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "responses": ids[:, p:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["xs", "s"])
    ap.add_argument("--lengths", nargs="+", type=int, default=[16, 64])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from transformers import Qwen2ForCausalLM
    from verl.workers.engine.hf_model import response_outputs
    from verl.workers.tiny import tiny_qwen2_config

    print(f"torch threads: {torch.get_num_threads()}  rows: {args.rows}")
    print("| size | R | real/padded tokens | pass | padded s | packed s | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(tiny_qwen2_config(size))
        for resp_len in args.lengths:
            mb = rl_batch(args.rows, resp_len, model.config.vocab_size)
            frac = float(mb["attention_mask"].float().mean())
            for pass_name in ("fwd (log-prob)", "fwd+bwd (update)"):
                times: dict[bool, list[float]] = {False: [], True: []}
                ratios = []
                for rep in range(args.reps + 1):
                    t_rep = {}
                    for packed in (False, True) if rep % 2 == 0 else (True, False):
                        t0 = time.perf_counter()
                        if pass_name.startswith("fwd+bwd"):
                            model.train()
                            out = response_outputs(
                                model, mb, "causal_lm", calculate_entropy=True, remove_padding=packed
                            )
                            (out["log_probs"].sum() + out["entropys"].sum()).backward()
                            model.zero_grad(set_to_none=True)
                        else:
                            model.eval()
                            with torch.no_grad():
                                response_outputs(model, mb, "causal_lm", remove_padding=packed)
                        t_rep[packed] = time.perf_counter() - t0
                    if rep:
                        for k, v in t_rep.items():
                            times[k].append(v)
                        ratios.append(t_rep[False] / t_rep[True])
                print(
                    f"| {size} | {resp_len} | {frac:.2f} | {pass_name} | {statistics.median(times[False]):.3f} | "
                    f"{statistics.median(times[True]):.3f} | {statistics.median(ratios):.2f}x |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
