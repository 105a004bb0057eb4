"""A run killed with SIGKILL mid-way (the rollout pool's worker, the trainer pool's worker, or the driver),
then resumed from its last checkpoint; shared by the native test (test_kill_resume.py) and the vLLM one
(tests/vllm). The killed run records every sample it trains (step, versions, sample index, prompt id) so
the resumed run can be checked against it:

- none counted twice: no sample index and no prompt is trained twice over both runs (steps up to the
  checkpoint in the first, every step in the second), and the stale-sample counter at the end equals
  the stale samples actually trained;
- none lost: every step trains its batch, and what was queued or drawn but unfinished at the checkpoint
  is trained after the resume (the queue first, sample for sample);
- the staleness bound holds across the resume: at most floor(s W) stale samples in every sync window,
  the first window after the resume (restored queue included) too.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

RUNNER = r"""
import json, os, sys
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
import ray
ray.init(address=sys.argv[1])
from verl.trainer.main_ppo import build_trainer
from verl_recipe_fully_async.main import RECIPE
sys.path.insert(0, sys.argv[2])
from kill_resume import recording_trainer_cls
out = sys.argv[3]
cfg = RECIPE.load_config(sys.argv[4:])
trainer = build_trainer(cfg, **{**RECIPE.trainer_kwargs(cfg),
                                "trainer_cls": recording_trainer_cls(os.path.join(out, "consumed.jsonl"))})
trainer.init_workers()
pids = {"rollout": [i["pid"] for i in trainer.rollout_wg.process_info()],
        "trainer": [i["pid"] for i in trainer.actor_rollout_wg.process_info()]}
with open(os.path.join(out, "pids.json"), "w") as f:
    json.dump(pids, f)
trainer.fit()
"""


def recording_trainer_cls(path: str):
    """``FullyAsyncRayTrainer`` that appends every trained sample to ``path`` (JSON lines)."""
    from verl_recipe_fully_async.trainer import FullyAsyncRayTrainer

    class Recording(FullyAsyncRayTrainer):
        def _sample_metrics(self, samples, version):
            with open(path, "a") as f:
                for s in samples:
                    rec = {
                        "step": self.global_steps,
                        "version": version,
                        "sample_version": s.version,
                        "index": s.index,
                        "prompt": int(s.data.non_tensor_batch["index"][0]),
                        "uid": str(s.data.non_tensor_batch["uid"][0]),
                    }
                    f.write(json.dumps(rec) + "\n")
            return super()._sample_metrics(samples, version)

    return Recording


def resumable_args(assets: list[str], out: Path, *overrides: str) -> list[str]:
    """The command line of a six-step run that checkpoints every 2 steps into ``out`` and resumes from it."""
    return [
        *assets,
        *overrides,
        "trainer.total_training_steps=6",
        "trainer.save_freq=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={out}",
    ]


def records(path: Path) -> list[dict]:
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )


def run_and_kill(
    gcs_address: str, out: Path, args: list[str], victim: str, log: Path, after_step: int
) -> None:
    """Start the run in a subprocess; once checkpoint ``global_step_{after_step}`` exists and the next step
    trained, SIGKILL ``victim`` (``rollout``/``trainer``: that pool's worker process; ``driver``: the
    run's own process) and wait for the run to end; it must fail, not hang or finish."""
    out.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, gcs_address, str(Path(__file__).parent), str(out), *args],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.time() + 1200
        while not (
            (out / f"global_step_{after_step}").is_dir()
            and any(r["step"] > after_step for r in records(out / "consumed.jsonl"))
        ):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.time() < deadline, "no checkpoint within 20 minutes"
            time.sleep(0.05)
        pid = proc.pid if victim == "driver" else json.loads((out / "pids.json").read_text())[victim][0]
        os.kill(pid, signal.SIGKILL)
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0, f"the run survived the loss of its {victim} worker: {log.read_text()[-2000:]}"


def resume_and_check(
    out: Path, args: list[str], total_steps: int, window_samples: int, staleness: float
) -> dict:
    """Resume the killed run in this process; check the claims of the module doc. Returns the last metrics."""
    from verl.trainer.main_ppo import build_trainer
    from verl.utils.checkpoint import load_trainer_state
    from verl_recipe_fully_async.main import RECIPE

    saved_steps = sorted(int(p.name.split("_")[-1]) for p in out.glob("global_step_*"))
    step = saved_steps[-1]
    assert step < total_steps, f"the run was not killed before it ended (checkpoints {saved_steps})"
    saved = load_trainer_state(str(out / f"global_step_{step}"))["fully_async"]
    queue = saved["coordinator"]["queue"]
    before = [r for r in records(out / "consumed.jsonl") if r["step"] <= step]
    after_path = out / "resumed.jsonl"
    cfg = RECIPE.load_config(args)
    trainer = build_trainer(cfg, **{**RECIPE.trainer_kwargs(cfg), "trainer_cls": recording_trainer_cls(str(after_path))})
    assert trainer.check_steps_remaining() == total_steps - step
    trainer.init_workers()
    try:
        last = trainer.fit()
    finally:
        trainer.shutdown()
    after = records(after_path)
    tbs = int(cfg.data.train_batch_size)
    assert last["training/global_step"] == total_steps
    # none lost: every step trained a full batch, in both runs
    assert len(before) == step * tbs and len(after) == (total_steps - step) * tbs
    # the saved queue is trained first, sample for sample
    assert [r["uid"] for r in after[: len(queue)]] == [str(s.data.non_tensor_batch["uid"][0]) for s in queue]
    assert [(r["index"], r["sample_version"]) for r in after[: len(queue)]] == [
        (s.index, s.version) for s in queue
    ]
    # ... and the prompts in flight at the checkpoint are trained after the resume
    unfinished = {int(p.non_tensor_batch["index"][0]) for p in saved["prompts_to_generate"]}
    assert unfinished <= {r["prompt"] for r in after}
    # none counted twice: sample indices and prompts are unique over both runs
    both = before + after
    assert len({r["index"] for r in both}) == len(both)
    assert len({r["prompt"] for r in both}) == len(both)
    stale = sum(r["version"] > r["sample_version"] for r in both)
    assert last["fully_async/count/stale_samples_processed"] == stale
    # the staleness bound in every window, across the resume
    windows: dict[int, list[int]] = {}
    for r in both:
        windows.setdefault(r["version"], []).append(r["version"] - r["sample_version"])
    bound = math.floor(staleness * window_samples)
    for version, ages in windows.items():
        assert sum(a > 0 for a in ages) <= bound, (version, ages, bound)
    return last


__all__ = ["RUNNER", "records", "recording_trainer_cls", "resumable_args", "resume_and_check", "run_and_kill"]
