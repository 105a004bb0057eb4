"""``trainer.worker_backend=local`` needs no Ray: the demo's SFT warm start and GRPO (validation, the
reward, the checkpoint) run in a process where importing ``ray`` raises, as on a machine without it.

The process blocks Ray with a meta-path finder that raises ImportError for ``ray`` and every
``ray.*`` module, so a top-level ``import ray`` anywhere on the path fails the run."""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

_BLOCK_RAY = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoRay(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "ray" or name.startswith("ray."):
                raise ImportError(f"ray is blocked in this process ({name})")
            return None

    sys.meta_path.insert(0, NoRay())
    """
)

_RUN = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from verl.trainer import demo

    out = Path(sys.argv[1])
    local = ["trainer.worker_backend=local"]
    summary = demo.run(out, sft_steps=3, rl_steps=2, workers=1, extra_rl_args=local + ["trainer.save_freq=2"],
                       extra_sft_args=local)
    try:
        import ray  # noqa: F401
        blocked = False
    except ImportError:
        blocked = True
    print("RESULT " + json.dumps({"summary": summary, "ray_loaded": "ray" in sys.modules, "blocked": blocked}))
    """
)


def test_sft_and_grpo_run_with_ray_blocked(tmp_path):
    code = _BLOCK_RAY + _RUN
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT "):])
    assert result["blocked"] and not result["ray_loaded"]
    summary = result["summary"]
    assert summary["sft_steps"] == 3 and summary["rl_steps"] == 2
    assert [step for step, _ in summary["val_curve"]] == [0, 2]  # validated before RL and at the end
    assert (tmp_path / "rl" / "global_step_2").is_dir()  # the checkpoint was written
    rows = [json.loads(x) for x in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert any("actor/pg_loss" in r for r in rows)
    sft_rows = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in sft_rows if "train/loss" in r] == [1, 2, 3]
