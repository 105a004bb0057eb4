"""Run a function under a hard wall-clock limit, from any thread.

Signal-based timeouts (``signal.alarm``) only work on the main thread and cannot interrupt C code
(sympy's big-integer arithmetic holds the interpreter inside one bytecode), so they fail inside Ray
actors' thread pools and on pathological expressions such as ``9^{9^{9^9}}``. Instead each call is
shipped to a long-lived helper process (``python -m verl.rewards.utils._limit_worker``) over pipes;
when the limit passes the helper is SIGKILLed and replaced on the next call. Plain subprocesses, not
``multiprocessing``, so nothing depends on how the parent's ``__main__`` was started.

Inside such a helper (``IN_LIMITED_WORKER``), nested limited calls run inline: the outer limit
already bounds them and a helper would otherwise spawn a helper per level.
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

# Set by the helper process itself; see the module docstring.
IN_LIMITED_WORKER = False

_HEADER = struct.Struct("!Q")
STARTUP_TIMEOUT = 300.0


def write_frame(fd: int, payload: bytes) -> None:
    data = _HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    """Read n bytes from fd; raise TimeoutError at the deadline, EOFError when the writer is gone."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, n - got)
        if not chunk:
            raise EOFError("time-limit helper process exited")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None) -> bytes:
    (size,) = _HEADER.unpack(read_exact(fd, _HEADER.size, deadline))
    return read_exact(fd, size, deadline)


class _Spawner:
    """Starts helper processes from one long-lived thread.

    Helpers ask the kernel to SIGKILL them when their parent dies (PR_SET_PDEATHSIG), but the kernel
    means the parent *thread*: a helper started from a short-lived pool thread would die with that
    thread. Starting them all from this thread ties them to the process instead.
    """

    def __init__(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            argv, env, reply = self._requests.get()
            try:
                reply.put(
                    subprocess.Popen(
                        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True
                    )
                )
            except OSError as e:
                reply.put(e)

    def popen(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="verl-time-limit-spawner", daemon=True
                )
                self._thread.start()
        reply: queue.Queue = queue.Queue()
        self._requests.put((argv, env, reply))
        out = reply.get()
        if isinstance(out, OSError):
            raise out
        return out


_spawner = _Spawner()


class _Helper:
    """One helper process; not thread-safe (the pool hands it to one caller at a time)."""

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        # -I would drop the venv's path configuration only partly; we need our own package importable,
        # so keep the environment but make sure the child's imports match ours.
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        # start_new_session (in the spawner): a Ctrl-C on the trainer's terminal is the trainer's business.
        self.proc = _spawner.popen(
            [sys.executable, "-m", "verl.rewards.utils._limit_worker", str(os.getpid()), *preload], env
        )
        # The time limit of a call must not include interpreter start-up and heavy imports (sympy
        # takes seconds on a busy machine): wait for the helper's ready frame first.
        try:
            read_frame(self.proc.stdout.fileno(), time.monotonic() + STARTUP_TIMEOUT)
        except (TimeoutError, EOFError) as e:
            self.kill()
            raise RuntimeError(f"time-limit helper did not start within {STARTUP_TIMEOUT} s: {e!r}") from e

    def call(self, payload: bytes, timeout: float | None) -> tuple[bool, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        write_frame(self.proc.stdin.fileno(), payload)
        ok, value = pickle.loads(read_frame(self.proc.stdout.fileno(), deadline))
        return ok, value

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


class _Restarting:
    """A helper being started in a background thread; ``result()`` is the helper (or None on failure)."""

    def __init__(self, preload: tuple[str, ...]):
        self._helper: _Helper | None = None
        self._thread = threading.Thread(target=self._start, args=(preload,), daemon=True)
        self._thread.start()

    def _start(self, preload: tuple[str, ...]) -> None:
        try:
            self._helper = _Helper(preload)
        except RuntimeError:
            self._helper = None

    def result(self) -> _Helper | None:
        self._thread.join()
        return self._helper

    def kill(self) -> None:
        helper = self.result()
        if helper is not None:
            helper.kill()


class TimeLimiter:
    """A small pool of helper processes running calls with a per-call wall-clock limit.

    ``call(fn, *args, timeout=...)`` returns ``fn(*args)`` or raises ``TimeoutError``; an exception
    raised by ``fn`` is re-raised in the caller. ``fn`` travels by cloudpickle, so functions loaded
    from a user's file work too. Thread-safe: up to ``max_workers`` calls run at once.
    """

    def __init__(self, max_workers: int = 2, preload: tuple[str, ...] = ()):
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self.preload = tuple(preload)
        self._idle: queue.LifoQueue[_Helper | None] = queue.LifoQueue()
        for _ in range(max_workers):
            self._idle.put(None)  # a slot; the helper starts on first use
        self.restarts = 0

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None, **kwargs: Any) -> Any:
        if IN_LIMITED_WORKER:
            return fn(*args, **kwargs)
        payload = cloudpickle.dumps((fn, args, kwargs))
        helper = self._idle.get()
        try:
            # A reused helper may have died between calls (killed from outside): retry once on a fresh one.
            for attempt in range(2):
                if isinstance(helper, _Restarting):
                    helper = helper.result()
                if helper is None or helper.proc.poll() is not None:
                    helper, fresh = _Helper(self.preload), True
                else:
                    fresh = False
                try:
                    ok, value = helper.call(payload, timeout)
                    break
                except (TimeoutError, EOFError, BrokenPipeError) as e:
                    helper.kill()
                    helper = None
                    self.restarts += 1
                    if isinstance(e, TimeoutError):
                        # Start the replacement now: interpreter start-up and imports take seconds.
                        helper = _Restarting(self.preload)
                        raise TimeoutError(f"{_name(fn)} did not finish within {timeout} s") from None
                    if fresh or attempt == 1:
                        raise RuntimeError(f"time-limit helper died while running {_name(fn)}: {e}") from e
        finally:
            self._idle.put(helper)
        if ok:
            return value
        raise value

    def close(self) -> None:
        for _ in range(self.max_workers):
            helper = self._idle.get()
            if helper is not None:
                helper.kill()
        for _ in range(self.max_workers):
            self._idle.put(None)


def _name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


_default: TimeLimiter | None = None
_default_lock = threading.Lock()


def default_limiter() -> TimeLimiter:
    """The process-wide limiter used by the math scorers (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = TimeLimiter(max_workers=max(1, min(4, os.cpu_count() or 1)), preload=("math_verify",))
        return _default


def call_with_time_limit(fn: Callable[..., Any], *args: Any, timeout: float, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in the default limiter; raises TimeoutError after ``timeout`` seconds."""
    return default_limiter().call(fn, *args, timeout=timeout, **kwargs)
