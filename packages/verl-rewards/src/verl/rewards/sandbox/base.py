"""The sandbox interface and its result type."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

# RunResult.status values
OK = "ok"  # exited with status 0
ERROR = "error"  # non-zero exit status (an exception, sys.exit(1), ...)
TIMEOUT = "timeout"  # wall-clock or CPU-time limit hit; the whole process tree was killed
MEMORY = "memory_limit"  # the address-space limit stopped an allocation
KILLED = "killed"  # ended by a signal other than a limit we set
SANDBOX_ERROR = "sandbox_error"  # the sandbox itself failed (not the program's fault)


@dataclass
class RunResult:
    """What happened to one program run. ``notes`` say in words which limit or guard acted."""

    status: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    wall_time: float = 0.0
    signal: str | None = None
    notes: list[str] = field(default_factory=list)
    isolation: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK


class Sandbox(ABC):
    """Runs one program (source text + stdin) and reports a `RunResult`; never raises for the
    program's misbehaviour, only for a misconfigured sandbox."""

    @abstractmethod
    def run(
        self,
        code: str,
        stdin: str = "",
        *,
        language: str = "python",
        timeout: float | None = None,
        memory_mb: int | None = None,
    ) -> RunResult: ...
