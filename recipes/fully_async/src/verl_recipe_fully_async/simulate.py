"""Idle-time accounting: what the asynchronous schedules should gain, from a colocated run's stage times.

    python -m verl_recipe_fully_async.simulate --gen 177.85 --train 113.81 --old-log-prob 53.92 --busy 0.3 \
        --train-scaling 0
    python -m verl_recipe_fully_async.simulate --from-metrics outputs/fully_async_compare/sync/metrics.jsonl

Inputs, per training step of a colocated (synchronous) run on N workers: ``gen`` seconds of generation,
``train`` seconds of update (and ``old_log_prob`` seconds of recomputed log-probs, which the asynchronous
modes skip: they train on the rollout's log-probs), and ``busy``: the share of the generation time the
workers actually decode. On a GPU, decoding a batch is latency-bound: the step lasts as long as the longest
response, while the rows that finished early leave their share of the GPU idle, so ``busy`` is about
mean / max response length. On a CPU decoding is compute-bound (the cost follows the tokens generated;
finished rows leave the batch), so ``busy`` is about 1.

Schedules, with a share ``r`` of the N workers generating and the rest training (generation's latency
does not depend on the number of workers, its busy work scales with 1 / workers; training time scales
with ``(1 / (1 - r)) ** train_scaling``: 1 when training is compute-bound, 0 when it is not, as upstream's
7B runs measured: 113.8 s per update on 128 colocated GPUs, 113.2 s on 64 trainer GPUs):

- colocated sync:   step = gen + old_log_prob + train;
- one-step-off:     step = max(G_r, T_r) + sync,   G_r = max(gen, busy * gen / r),  T_r as above;
- fully async:      step = max(busy * gen / r, T_r) + sync / trigger: streaming with continuous batching
  refills the slots of finished rows and partial rollouts keep weight syncs from waiting for the longest
  response, so generation costs only its busy work (upstream's vLLM server; this recipe's native engine
  decodes waves, which refill nothing: its fully async mode lies between the two lines).

Each pool's idle share is ``1 - (its work) / step``. This is an upper-bound model of the overlap, not a
measurement; README.md sets it next to upstream's measured speed-ups and this machine's runs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Prediction:
    mode: str
    step_s: float
    speedup: float
    rollout_idle: float  # share of the rollout workers' time they do not decode
    trainer_idle: float


def predict(
    gen: float,
    train: float,
    busy: float,
    old_log_prob: float = 0.0,
    rollout_share: float = 0.5,
    sync: float = 0.0,
    trigger: int = 1,
    train_scaling: float = 1.0,
) -> list[Prediction]:
    """The three schedules for per-step stage times of a colocated run (see the module doc)."""
    if not 0.0 < busy <= 1.0:
        raise ValueError(f"busy={busy} must be in (0, 1]: the share of the generation time spent decoding")
    if not 0.0 < rollout_share < 1.0:
        raise ValueError(f"rollout_share={rollout_share} must be in (0, 1)")
    r = rollout_share
    colocated = gen + old_log_prob + train
    # the colocated pool decodes busy * gen of its gen seconds and computes the rest of the step
    out = [
        Prediction(
            "colocated sync",
            colocated,
            1.0,
            1.0 - (busy * gen + old_log_prob + train) / colocated,
            1.0 - (busy * gen + old_log_prob + train) / colocated,
        )
    ]
    work_gen = busy * gen / r  # the same decoding work on a share r of the workers
    gen_r = max(gen, work_gen)  # ... but never faster than the longest response
    train_r = train / (1.0 - r) ** train_scaling
    step = max(gen_r, train_r) + sync
    out.append(
        Prediction("one-step-off", step, colocated / step, 1.0 - work_gen / step, 1.0 - train_r / step)
    )
    step = max(work_gen, train_r) + sync / max(trigger, 1)
    out.append(Prediction("fully async", step, colocated / step, 1.0 - work_gen / step, 1.0 - train_r / step))
    return out


def from_metrics(path: str) -> dict[str, float]:
    """Mean per-step ``timing_s/gen``, ``timing_s/update_actor``, ``timing_s/old_log_prob`` of a core run."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if "timing_s/gen" in r]
    if not rows:
        raise ValueError(
            f"{path} has no step with timing_s/gen (a core RayPPOTrainer metrics.jsonl is needed)"
        )

    def mean(key: str) -> float:
        return sum(r.get(key, 0.0) for r in rows) / len(rows)

    return {
        "gen": mean("timing_s/gen"),
        "train": mean("timing_s/update_actor"),
        "old_log_prob": mean("timing_s/old_log_prob"),
    }


def table(preds: list[Prediction]) -> str:
    lines = ["| schedule | step s | speed-up | rollout idle | trainer idle |", "|---|---|---|---|---|"]
    lines += [
        f"| {p.mode} | {p.step_s:.1f} | {p.speedup:.2f}x | {p.rollout_idle:.0%} | {p.trainer_idle:.0%} |"
        for p in preds
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen", type=float, help="seconds of generation per colocated step")
    ap.add_argument("--train", type=float, help="seconds of actor update per colocated step")
    ap.add_argument(
        "--old-log-prob", type=float, default=0.0, help="seconds of old log-probs (skipped async)"
    )
    ap.add_argument(
        "--busy", type=float, default=1.0, help="share of gen spent decoding (GPU: ~mean/max length)"
    )
    ap.add_argument("--rollout-share", type=float, default=0.5)
    ap.add_argument("--sync", type=float, default=0.0, help="seconds per weight sync")
    ap.add_argument("--trigger", type=int, default=1, help="steps per weight sync (fully async)")
    ap.add_argument(
        "--train-scaling",
        type=float,
        default=1.0,
        help="training time ~ (1 / trainer share) ** this: 1 compute-bound, 0 not at all",
    )
    ap.add_argument("--from-metrics", help="take gen/train/old_log_prob from a core metrics.jsonl")
    args = ap.parse_args(argv)
    times = (
        from_metrics(args.from_metrics)
        if args.from_metrics
        else {"gen": args.gen, "train": args.train, "old_log_prob": args.old_log_prob}
    )
    if times["gen"] is None or times["train"] is None:
        ap.error("give --gen and --train, or --from-metrics")
    text = table(
        predict(
            busy=args.busy,
            rollout_share=args.rollout_share,
            sync=args.sync,
            trigger=args.trigger,
            train_scaling=args.train_scaling,
            **times,
        )
    )
    print(text)
    return text


if __name__ == "__main__":
    main()


__all__ = ["Prediction", "from_metrics", "main", "predict", "table"]
