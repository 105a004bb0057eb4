"""Client side of the step-server protocol spoken by ``bare.py --serve`` and ``trl_driver.py``.

The server prints ``READY {json}`` when set up, answers each ``step`` line with ``RESULT {json}`` and
leaves on ``quit``. Other output lines (library warnings, progress) are kept in a log file.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

#: ``--omp-wait-policy`` values -> the libgomp variables every process of a run gets (our driver and
#: Ray workers, bare, TRL; not the competitor). "default" is libgomp's own behaviour when no policy is
#: set (spin 300000 iterations at a barrier, then sleep), written out through GOMP_SPINCOUNT.
OMP_WAIT_POLICIES = {
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "default": {"GOMP_SPINCOUNT": "300000"},
}


def add_omp_wait_policy_arg(ap) -> None:
    """``--omp-wait-policy`` on an argparse parser (apply it with `apply_omp_wait_policy`)."""
    ap.add_argument(
        "--omp-wait-policy",
        default=None,
        help="OpenMP wait policy of every process (stepper.OMP_WAIT_POLICIES; omitted: verl's rule for "
        "our workers, libgomp's default for bare/TRL)",
    )


def apply_omp_wait_policy(policy: str | None) -> None:
    """Put ``policy``'s libgomp variables in this process's environment, which the step servers and our
    Ray workers (started by this process's local raylet) inherit; None leaves the environment as it is
    (bare/TRL: libgomp's default; our workers: verl's rule). Call before any step server or Ray starts."""
    if policy is None:
        return
    spin = policy.removeprefix("spin:")
    if spin != policy and spin.isdigit():  # "spin:N": libgomp spins N iterations at a barrier, then sleeps
        values = {"GOMP_SPINCOUNT": spin}
    elif policy in OMP_WAIT_POLICIES:
        values = OMP_WAIT_POLICIES[policy]
    else:
        raise SystemExit(
            f"--omp-wait-policy {policy!r}: expected one of {sorted(OMP_WAIT_POLICIES)} or spin:N"
        )
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        os.environ.pop(name, None)
    os.environ.update(values)


def omp_wait_env() -> dict[str, str]:
    """This process's libgomp wait variables (to report which policy a run had)."""
    return {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ}


class StepServer:
    """A subprocess that runs one training step per :meth:`step` call."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict | None = None):
        self.name = name
        self.cmd = cmd
        self.log_path = Path(log_path)
        self.log = open(self.log_path, "w")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1, env=env
        )
        self.ready = self._read("READY")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, tag: str) -> dict:
        for line in self.proc.stdout:
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1 :])
            self.log.write(line)
        self.log.flush()
        raise RuntimeError(
            f"{self.name} step server exited (code {self.proc.wait()}) before printing {tag}; "
            f"command: {' '.join(self.cmd)}; its output is in {self.log_path}"
        )

    def step(self) -> dict:
        """Run one step in the server; returns its ``RESULT`` record."""
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return self._read("RESULT")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()
