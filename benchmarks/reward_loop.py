"""Step time of the synchronous GRPO trainer with and without the reward loop when scoring is slow.

The demo's tiny model and addition prompts, scored by the sandboxed code reward: each prompt's ground
truth is a stdio test (``apps`` format) with ``--cases`` cases, so every sample runs ``--cases`` Python
programs in the local sandbox (subprocesses under rlimits/namespaces), the slow scorer the reward loop is
for. Both sides are ``python -m verl.trainer.main_ppo`` with the same arguments but
``reward.use_reward_loop`` (``--chunks`` chunks, ``--num-workers`` scoring threads); every round runs
each side once (``--steps`` steps, alternating which goes first) and takes the median ``timing_s/step``
of the steps after the first (warm-up); the ratio is the median of the per-round ratios.

    uv run python benchmarks/reward_loop.py --rounds 5 --steps 6            # the measurement (quiet machine)
    uv run python benchmarks/reward_loop.py --rounds 1 --steps 2 --quick    # does it run (tiny)

See docs/reward_loop.md for the design and the table.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # Ray workers share this environment

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alternating import alternate  # noqa: E402


def code_rows(rows: list[dict], cases: int) -> list[dict]:
    """The addition rows as code problems: "print a+b" as a program, checked on ``cases`` stdio cases
    (the same expected output each time: the point is the sandbox's work per sample, ``cases`` runs)."""
    out = []
    for row in rows:
        question = row["prompt"][0]["content"]
        answer = row["reward_model"]["ground_truth"]
        spec = {"inputs": ["\n"] * cases, "outputs": [f"{answer}\n"] * cases}
        out.append({
            "data_source": "apps",
            "prompt": [{"role": "user", "content": f"code: {question}"}],
            "ability": "code",
            "reward_model": {"style": "rule", "ground_truth": json.dumps(spec)},
            "extra_info": row["extra_info"],
        })  # fmt: skip
    return out


def write_code_task(data_dir: Path, cases: int) -> dict[str, str]:
    """``{"train", "test"}`` parquet files of `code_rows` over the demo's addition split."""
    from verl.trainer.demo import addition_rows
    from verl.utils.dataset.rows import write_parquet

    data_dir.mkdir(parents=True, exist_ok=True)
    return {split: str(write_parquet(code_rows(addition_rows(split), cases), data_dir / f"{split}.parquet"))
            for split in ("train", "test")}  # fmt: skip


def trainer_args(model: str, data: dict, out: Path, steps: int, workers: int, prompts: int, n: int,
                 loop: bool, chunks: int, num_workers: int) -> list[str]:  # fmt: skip
    """The demo's GRPO arguments on the code task, one side of the comparison."""
    from verl.trainer.demo import rl_args

    args = dict(a.split("=", 1) for a in rl_args(model, data, out, steps, workers))
    args.update({
        "data.train_batch_size": str(prompts), "actor_rollout_ref.rollout.n": str(n),
        "actor_rollout_ref.actor.ppo_mini_batch_size": str(prompts),
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": str(prompts * n // workers),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": str(prompts * n // workers),
        "data.max_prompt_length": "48", "data.max_response_length": "16", "trainer.val_before_train": "false", "trainer.test_freq": "-1",
        "trainer.logger": "[jsonl]", "trainer.progress_bar": "false",
        "reward.sandbox.timeout": "10", "reward.use_reward_loop": str(loop).lower(),
        "reward.reward_loop_chunks": str(chunks), "reward.num_workers": str(num_workers),
    })  # fmt: skip
    return [f"{k}={v}" for k, v in args.items()]


class Side:
    """One configuration; ``time("step", steps)`` runs main_ppo for ``steps`` steps in a fresh process and
    returns the median step time after the first step."""

    def __init__(self, name: str, loop: bool, opts: argparse.Namespace, model: str, data: dict, root: Path):
        self.name, self.loop, self.opts, self.model, self.data, self.root = name, loop, opts, model, data, root
        self.runs = 0
        self.overlapped: list[float] = []

    def time(self, row: str, steps: int) -> float:
        o = self.opts
        self.runs += 1
        out = self.root / f"{self.name}_{self.runs}"
        args = trainer_args(self.model, self.data, out, steps, o.workers, o.prompts, o.n, self.loop, o.chunks,
                            o.num_workers)  # fmt: skip
        log = out.with_suffix(".log")
        out.mkdir(parents=True)
        with open(log, "w") as f:
            proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], stdout=f, stderr=subprocess.STDOUT)
        if proc.returncode:
            raise RuntimeError(f"{self.name}: main_ppo exited {proc.returncode}; see {log}")
        rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
        train = [r for r in rows if "timing_s/step" in r]
        if len(train) != steps:
            raise RuntimeError(f"{self.name}: {len(train)} steps logged, expected {steps}; see {log}")
        self.overlapped += [r["reward_loop/overlapped_chunks"] for r in train if "reward_loop/overlapped_chunks" in r]
        timed = train[1:] or train
        return statistics.median(r["timing_s/step"] for r in timed)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6, help="training steps per run (the first is not timed)")
    ap.add_argument("--workers", type=int, default=2, help="FSDP2 CPU workers")
    ap.add_argument("--prompts", type=int, default=16, help="data.train_batch_size")
    ap.add_argument("--n", type=int, default=4, help="actor_rollout_ref.rollout.n")
    ap.add_argument("--cases", type=int, default=4, help="sandboxed program runs per sample")
    ap.add_argument("--chunks", type=int, default=4, help="reward.reward_loop_chunks")
    ap.add_argument("--num-workers", type=int, default=8, help="reward.num_workers")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: 4 prompts x 2, 2 chunks (checks that it runs)")
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary directory)")
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.prompts, opts.n, opts.chunks, opts.cases = 4, 2, 2, 2

    from verl.trainer.demo import build_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(opts.out or tmp)
        model = build_model(root / "model")
        data = write_code_task(root / "data", opts.cases)
        sides = {
            "one_pass": Side("one_pass", False, opts, model, data, root),
            "reward_loop": Side("reward_loop", True, opts, model, data, root),
        }
        times = alternate(sides, ["step"], opts.rounds, opts.steps)
    one, loop = times["one_pass"]["step"], times["reward_loop"]["step"]
    ratio = statistics.median(b / a for a, b in zip(one, loop))
    print(f"\n{opts.prompts} prompts x n={opts.n}, {opts.cases} sandboxed runs per sample, {opts.chunks} chunks, "
          f"{opts.num_workers} scoring threads, {opts.workers} workers, {opts.rounds} rounds x {opts.steps} steps")  # fmt: skip
    print("| step time, one pass | step time, reward loop | reward loop / one pass | chunks scored during generation |")
    print("|---|---|---|---|")
    overlapped = sides["reward_loop"].overlapped
    print(f"| {statistics.median(one):.2f} s | {statistics.median(loop):.2f} s | {ratio:.2f} | "
          f"{statistics.median(overlapped) if overlapped else 0:.0f} of {opts.chunks} |")  # fmt: skip


if __name__ == "__main__":
    main()
