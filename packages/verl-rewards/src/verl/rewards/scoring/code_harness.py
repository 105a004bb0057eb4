"""Program texts (and their stdin) the code scorer sends to a sandbox.

stdin/stdout tests run the candidate alone: its output is compared in the scorer's process. Tests that
call the candidate's functions (HumanEval ``check(candidate)``, MBPP asserts, call-based ``fn_name``
cases) run `sandbox_harness` (its text, then ``main(<solution>)``): a judge process that keeps the
candidate in a process of its own and lets only plain data cross. Its stdin carries a one-time token
and the tests, so the program file itself holds neither; it prints ``<token> ...`` verdict lines.
Every program compiles the candidate itself, so a syntax error is told apart from a runtime error by
exit status ``SYNTAX_EXIT``.
"""

from __future__ import annotations

import json
import pathlib

from verl.rewards.scoring.sandbox_harness import HARNESS_EXIT, SYNTAX_EXIT

__all__ = ["HARNESS_EXIT", "SYNTAX_EXIT", "call_stdin", "judged_program", "stdio_program", "tests_stdin"]

_HARNESS = pathlib.Path(__file__).with_name("sandbox_harness.py").read_text(encoding="utf-8")

_STDIO = f"""
import sys as _sys
try:
    _code = compile(SOLUTION, "solution.py", "exec")
except (SyntaxError, ValueError) as _e:
    print("SyntaxError:", _e, file=_sys.stderr)
    _sys.exit({SYNTAX_EXIT})
del _sys
exec(_code, {{"__name__": "__main__", "__builtins__": __builtins__}})
"""


def stdio_program(solution: str) -> str:
    return f"SOLUTION = {solution!r}\n" + _STDIO


def judged_program(solution: str) -> str:
    """The judge with the candidate's source; what to judge comes on stdin (`tests_stdin`, `call_stdin`)."""
    return f"{_HARNESS}\n\nmain({solution!r})\n"


def tests_stdin(
    token: str, tests: list[str], setup: str = "", prompt: str = "", entry_point: str | None = None
) -> str:
    """Run each test (Python source) in the judge. With ``entry_point`` (HumanEval) only that name is the
    candidate's and ``prompt`` defines the helpers the tests use; without it (MBPP) the tests call the
    candidate's functions by name."""
    spec = {"mode": "tests", "tests": tests, "setup": setup, "prompt": prompt, "entry_point": entry_point}
    return token + "\n" + json.dumps(spec)


def call_stdin(token: str, fn_name: str, args: list) -> str:
    """Call ``fn_name(*args)`` (or ``Solution().fn_name``) once and print the encoded result."""
    return token + "\n" + json.dumps({"mode": "call", "fn_name": fn_name, "args": args})
