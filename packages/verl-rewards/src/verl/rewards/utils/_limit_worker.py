"""Helper process for `verl.rewards.utils.time_limit`: read (fn, args, kwargs) frames, answer (ok, value)."""

import ctypes
import importlib
import os
import pickle
import signal
import sys

import cloudpickle
from verl.rewards.utils import time_limit


def _die_with_parent(parent_pid: int) -> None:
    # Without this a helper stuck in C code would outlive a trainer that was SIGKILLed.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


def main() -> None:
    _die_with_parent(int(sys.argv[1]))
    time_limit.IN_LIMITED_WORKER = True
    fd_in, fd_out = sys.stdin.buffer.fileno(), sys.stdout.buffer.fileno()
    # The called function must not write into our answer channel.
    sys.stdout = sys.stderr
    for module in sys.argv[2:]:
        importlib.import_module(module)
    time_limit.write_frame(fd_out, b"ready")
    while True:
        try:
            frame = time_limit.read_frame(fd_in, None)
        except EOFError:
            return
        try:
            fn, args, kwargs = cloudpickle.loads(frame)
            result = (True, fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - every failure is reported to the caller
            result = (False, e)
        try:
            payload = pickle.dumps(result)
        except Exception as e:  # noqa: BLE001 - an unpicklable result or exception
            payload = pickle.dumps((False, RuntimeError(f"result not picklable: {e!r}; value {result[1]!r}")))
        time_limit.write_frame(fd_out, payload)


if __name__ == "__main__":
    main()
