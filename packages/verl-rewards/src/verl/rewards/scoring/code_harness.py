"""Program texts the code scorer sends to a sandbox.

Every program embeds the candidate as a string and compiles it itself, so a syntax error is told
apart from a runtime error by exit status ``SYNTAX_EXIT``. Programs whose verdict is computed
inside the sandbox (call-based and assert-based tests) read a one-time token from the first line
of stdin before running the candidate and print ``<token> <index> <ok|fail>`` per test, so output
the candidate prints itself cannot pass as a verdict, nor can exiting early.
"""

from __future__ import annotations

import json

SYNTAX_EXIT = 97

_COMPILE = f"""
import sys as _sys
try:
    _code = compile(SOLUTION, "solution.py", "exec")
except (SyntaxError, ValueError) as _e:
    print("SyntaxError:", _e, file=_sys.stderr)
    _sys.exit({SYNTAX_EXIT})
"""

_STDIO = """
_g = {"__name__": "__main__", "__builtins__": __builtins__}
exec(_code, _g)
"""

_CALL = """
import json as _json
_token = _sys.stdin.readline().strip()
_g = {"__name__": "__main__", "__builtins__": __builtins__}
exec(_code, _g)
if "Solution" in _g and hasattr(_g["Solution"], FN_NAME):
    _fn = getattr(_g["Solution"](), FN_NAME)
else:
    _fn = _g[FN_NAME]
_result = _fn(*ARGS)
if isinstance(_result, tuple):
    _result = list(_result)
_sys.stdout.flush()
print("\\n" + _token, _json.dumps(_result, default=repr), flush=True)
"""

_ASSERTS = """
_token = _sys.stdin.readline().strip()
_g = {"__name__": "__candidate__", "__builtins__": __builtins__}
exec(_code, _g)
exec(compile(SETUP, "setup.py", "exec"), _g)
for _i, _t in enumerate(TESTS):
    try:
        exec(compile(_t, f"test_{_i}.py", "exec"), _g)
        _v = "ok"
    except AssertionError:
        _v = "fail"
    except Exception as _e:  # a crash in one test must not hide the others
        print(f"test {_i}: {type(_e).__name__}: {_e}", file=_sys.stderr)
        _v = "error"
    print("\\n" + _token, _i, _v, flush=True)
"""


def stdio_program(solution: str) -> str:
    return f"SOLUTION = {solution!r}\n" + _COMPILE + _STDIO


def call_program(solution: str, fn_name: str, args: list) -> str:
    head = f"SOLUTION = {solution!r}\nFN_NAME = {fn_name!r}\nARGS = __import__('json').loads({json.dumps(args)!r})\n"
    return head + _COMPILE + _CALL


def assert_program(solution: str, tests: list[str], setup: str = "") -> str:
    return f"SOLUTION = {solution!r}\nSETUP = {setup!r}\nTESTS = {tests!r}\n" + _COMPILE + _ASSERTS
