"""Errors a worker group raises when a worker fails, whatever the backend runs the workers on."""

from __future__ import annotations


class WorkerError(RuntimeError):
    """A worker method raised; the message names the worker rank, the method and the remote traceback."""

    def __init__(self, message: str, rank: int, method: str):
        super().__init__(message)
        self.rank = rank
        self.method = method


class WorkerDiedError(WorkerError):
    """A worker process died (killed, crashed, out of memory); its group cannot continue."""
