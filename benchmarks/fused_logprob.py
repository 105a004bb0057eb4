"""Fused (chunked) LM head + log-prob/entropy vs the unfused logits path: peak memory and time.

    uv run python benchmarks/fused_logprob.py [--tokens 2048] [--hidden 512] [--vocabs 32768 65536]
                                             [--rounds 3] [--reps 1] [--threads 1]

What is measured is the work the actor's ``use_fused_kernels`` switch changes: from the last hidden
states [T, H] and the LM head weight [V, H] to the log-probs of the labels and the token entropies
(temperature 0.7), then a backward of ``sum(w1 * log_probs) + sum(w2 * entropy)`` into the hidden
states and the weight, as a training micro-batch does.

- ``unfused``: ``verl.workers.engine.hf_model``'s path: logits = hidden @ W^T, ``.float() / temperature``,
  ``logprobs_from_logits`` and ``entropy_from_logits`` (autograd keeps the [T, V] intermediates).
- ``fused``: ``verl.workers.engine.fused_logprob.fused_log_prob_entropy`` (chunks of 512 tokens, the
  backward recomputes each chunk's logits).

Every (vocab, variant, round) runs in its own fresh process with ``MALLOC_MMAP_THRESHOLD_=131072``
(tensor buffers are mmap-ed and go back to the OS when freed, so the resident set follows live
memory): reported "peak" = the highest RSS a sampling thread (every 0.2 ms) sees during one
forward+backward minus the RSS just before it (inputs allocated, after a warm-up pass of both variants on 8 tokens). Time: median process CPU seconds of ``--reps`` further forward+backward passes (CPU time,
not wall: on a shared machine it leaves out the time spent waiting for a core). The variants
alternate order every round; ratios are medians of per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_during(fn) -> int:
    """Highest RSS seen while ``fn`` runs (torch's kernels release the GIL, so the sampler keeps up)."""
    import threading

    peak, done = [_rss_bytes()], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.0002)

    t = threading.Thread(target=sample)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return max(peak[0], _rss_bytes())


def _child(variant: str, tokens: int, hidden: int, vocab: int, reps: int, threads: int) -> dict:
    import torch
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
    from verl.workers.engine.fused_logprob import fused_log_prob_entropy

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    h0 = torch.randn(tokens, hidden, generator=g)
    w0 = torch.randn(vocab, hidden, generator=g) * hidden**-0.5
    labels = torch.randint(0, vocab, (tokens,), generator=g)
    w1, w2 = torch.randn(tokens, generator=g), torch.randn(tokens, generator=g)
    temperature = 0.7

    def step():
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        if variant == "fused":
            lp, ent = fused_log_prob_entropy(h, w, labels, temperature)
        else:
            logits = (h @ w.t()).float() / temperature
            lp, ent = logprobs_from_logits(logits, labels), entropy_from_logits(logits)
        ((lp * w1).sum() + (ent * w2).sum()).backward()
        return float(lp.detach().sum())

    # warm-up on a few tokens: the first pass maps the BLAS/oneDNN code and per-thread buffers into the RSS
    small = torch.randn(8, hidden, generator=g, requires_grad=True)
    lp, ent = fused_log_prob_entropy(small, w0[:64].clone().requires_grad_(), labels[:8] % 64, temperature)
    (lp.sum() + ent.sum()).backward()
    logits = (small @ w0[:64].t()).float() / temperature
    (logprobs_from_logits(logits, labels[:8] % 64).sum() + entropy_from_logits(logits).sum()).backward()
    del small, lp, ent, logits
    before = _rss_bytes()
    peak = _peak_rss_during(step) - before
    cpu = []
    for _ in range(reps):
        t = time.process_time()
        step()
        cpu.append(time.process_time() - t)
    return {"peak_bytes": peak, "cpu_s": statistics.median(cpu)}


def _run(variant: str, args: argparse.Namespace, vocab: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        variant,
        "--tokens",
        str(args.tokens),
        "--hidden",
        str(args.hidden),
        "--vocabs",
        str(vocab),
        "--reps",
        str(args.reps),
        "--threads",
        str(args.threads),
    ]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--vocabs", type=int, nargs="+", default=[32768, 65536])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--child", choices=["fused", "unfused"])
    args = p.parse_args()
    if args.child:
        print(
            json.dumps(_child(args.child, args.tokens, args.hidden, args.vocabs[0], args.reps, args.threads))
        )
        return
    print(
        f"T={args.tokens} tokens, H={args.hidden}, fp32, temperature 0.7, {args.threads} thread(s), "
        f"{args.rounds} alternating rounds, load average {os.getloadavg()[0]:.1f} at start"
    )
    print("| vocab | unfused peak | fused peak | peak ratio | unfused CPU s | fused CPU s | time ratio |")
    print("|---|---|---|---|---|---|---|")
    for vocab in args.vocabs:
        res = {"fused": [], "unfused": []}
        for r in range(args.rounds):
            order = ["unfused", "fused"] if r % 2 == 0 else ["fused", "unfused"]
            for variant in order:
                res[variant].append(_run(variant, args, vocab))
            print(f"vocab {vocab}: round {r + 1}/{args.rounds} done", file=sys.stderr)
        med = {
            k: {m: statistics.median(x[m] for x in v) for m in ("peak_bytes", "cpu_s")}
            for k, v in res.items()
        }
        peak_ratio = statistics.median(
            f["peak_bytes"] / u["peak_bytes"] for f, u in zip(res["fused"], res["unfused"])
        )
        time_ratio = statistics.median(f["cpu_s"] / u["cpu_s"] for f, u in zip(res["fused"], res["unfused"]))
        mib = 1 << 20
        print(
            f"| {vocab} | {med['unfused']['peak_bytes'] / mib:.0f} MiB | {med['fused']['peak_bytes'] / mib:.0f} MiB "
            f"| {peak_ratio:.3f} | {med['unfused']['cpu_s']:.2f} | {med['fused']['cpu_s']:.2f} | {time_ratio:.2f} |"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
