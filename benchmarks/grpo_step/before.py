"""Our step as of an older commit ("ours_before"), as a step server beside the bare and TRL ones.

The old sources come from a git worktree of that commit (``ensure_worktree``: default commit
06aa171, the state before the performance work of issue 9, in ``/tmp/verl_before``). The server runs
under the workspace's own interpreter with ``PYTHONPATH`` set to the worktree's ``packages/*/src``,
which come before the editable installs' ``.pth`` paths on ``sys.path`` and so shadow them; the Ray
workers get the same ``PYTHONPATH`` through the runtime env. Both places are checked at start-up
(``verl.__file__`` here, ``verl.workers.__file__`` in every actor worker): a mismatch is an error,
never a silent measurement of the new code.

The server builds the trainer with ``ours.overrides(variant="before")`` on its own Ray cluster and
runs the unmodified ``fit()`` loop; the benchmark's tracking hook (``ours.BenchTrainer``) holds the
loop after every step until the harness sends the next ``step`` line. Protocol as ``bare.py --serve``:
``READY {json}`` once, ``RESULT {json}`` per step, ``quit`` to leave.

    python before.py --serve --worktree /tmp/verl_before --model DIR --new-tokens 16 --steps 12
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_REV = "06aa171"
DEFAULT_WORKTREE = Path("/tmp/verl_before")


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def ensure_worktree(rev: str = DEFAULT_REV, path: Path = DEFAULT_WORKTREE) -> Path:
    """A detached git worktree of ``rev`` at ``path`` (created, or reused when it is at ``rev``)."""
    if shutil.which("git") is None:
        raise SystemExit(
            f"ours_before needs git (to check out {rev} into {path}); install git or pass --before none"
        )
    try:
        want = _git("rev-parse", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"--before {rev}: not a commit of {REPO} ({e.stderr.strip()})") from e
    path = Path(path)
    if path.exists():
        have = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        if have != want:
            raise SystemExit(
                f"{path} exists but is at {have or 'no git checkout'}, not {rev} ({want}); "
                f"remove it (git -C {REPO} worktree remove --force {path}) or pass another --before-worktree"
            )
        return path
    _git("worktree", "prune")  # forget a registered worktree whose folder was deleted
    _git("worktree", "add", "--detach", str(path), want)
    return path


def src_paths(worktree: Path) -> list[str]:
    """The worktree's package source roots (``packages/*/src``), verl-core first."""
    roots = sorted(str(p) for p in Path(worktree).glob("packages/*/src"))
    if not any(r.endswith("verl-core/src") for r in roots):
        raise SystemExit(f"{worktree}: no packages/verl-core/src; is it a checkout of this repository?")
    core = [r for r in roots if r.endswith("verl-core/src")]
    return core + [r for r in roots if r not in core]


def server_env(worktree: Path) -> dict[str, str]:
    """This process's environment with the worktree's sources first on ``PYTHONPATH``."""
    old = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(src_paths(worktree) + ([old] if old else []))}


def _check_under(what: str, file: str, worktree: Path) -> None:
    if not Path(file).resolve().is_relative_to(Path(worktree).resolve()):
        raise SystemExit(
            f"ours_before: {what} is {file}, not under the worktree {worktree}: the old sources do not "
            "shadow the editable install (is PYTHONPATH set to the worktree's packages/*/src?)"
        )


def _wait_for_command() -> None:
    cmd = sys.stdin.readline().strip()
    if cmd == "step":
        return
    if cmd in ("quit", ""):
        import ray

        ray.shutdown()
        sys.stdout.flush()
        os._exit(0)  # fit() is mid-loop; nothing to save
    raise SystemExit(f"before.py: unknown command {cmd!r}; expected 'step' or 'quit'")


def serve(args: argparse.Namespace) -> None:
    worktree = Path(args.worktree)
    import verl

    _check_under("verl.__file__", verl.__file__, worktree)
    sys.path.insert(0, str(HERE))
    import ours

    _check_under(
        "verl.trainer.ppo.ray_trainer", sys.modules[ours.RayPPOTrainer.__module__].__file__, worktree
    )
    ours.start_ray(args.worker_threads, extra_env={"PYTHONPATH": os.environ["PYTHONPATH"]})
    trainer = ours.build(Path(args.model), args.new_tokens, args.steps, Path(args.out_dir), variant="before")
    workers = ours.worker_info(trainer)
    for w in workers:
        _check_under(
            f"verl.workers.__file__ in the actor worker (pid {w['pid']})", w["verl_workers_file"], worktree
        )
    head = subprocess.run(["git", "-C", str(worktree), "rev-parse", "HEAD"], capture_output=True, text=True)
    print(
        "READY "
        + json.dumps(
            {
                "impl": "ours_before",
                "commit": head.stdout.strip(),
                "verl_file": verl.__file__,
                "workers": workers,
                "threads": [w["threads"] for w in workers],
            }
        ),
        flush=True,
    )

    def peak_rss_mib() -> float:
        driver = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        return driver + sum(_vm_hwm_mib(w["pid"]) for w in workers)

    def between_steps(step: int) -> None:
        rec = trainer.recorder.records[-1]
        print(
            "RESULT " + json.dumps({**rec, "step_s": rec["wall_s"], "peak_rss_mib": peak_rss_mib()}),
            flush=True,
        )
        _wait_for_command()

    trainer.between_steps = between_steps
    trainer.cpu_clock = ours.cpu_clock_of([w["pid"] for w in workers])
    _wait_for_command()  # the first step starts on the harness's first "step"
    trainer.fit()
    _wait_for_command()  # "quit" after the last step
    raise SystemExit("before.py: a step was asked for after the configured number of steps")


def _vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM line")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", action="store_true", required=True)
    ap.add_argument("--worktree", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="total steps (warm-up + measured)")
    ap.add_argument("--worker-threads", type=int, default=2)
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    serve(args)


if __name__ == "__main__":
    main()
