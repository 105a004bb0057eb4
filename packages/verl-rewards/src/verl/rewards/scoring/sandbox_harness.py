"""The program the code scorer runs in a sandbox for function-call tests: a judge and the candidate,
in two processes, talking in plain data.

This file is self-contained (standard library only, Python 3.8+): `code_harness` sends its text,
followed by one ``main(...)`` call, as the program, and the scorer imports it for `decode`.

The judge never runs the candidate's code. It forks the candidate's process first, before it holds
anything secret, and makes itself non-dumpable before that, so the candidate can neither ptrace it nor
open its ``/proc/<pid>/{mem,fd,environ}``. The candidate's process gets ``/dev/null`` as stdin, the
judge's stderr as its stdout, and no other descriptor than its two pipe ends: it cannot write the
judge's verdict stream. Only then does the judge read the one-time token and the tests from stdin.
Every call the tests make of a candidate function goes over the pipe as plain data (`encode`), and
what comes back is decoded by the judge (`decode`) into values of exactly the builtin types (never a
subclass, never an object of the candidate's); the tests' comparisons then run in the judge, on
values the candidate cannot reach. A value that is not plain data comes back as an opaque `Remote`
handle: it equals only itself and has no truth value, length, order or arithmetic.

The judge prints ``<token> <i> ok|fail|error|hack`` per test (``hack``: the test failed and the
candidate returned a value made to fool comparisons, or broke the protocol), or for a single call
``<token> result <encoded value>`` / ``<token> error <exception>`` / ``<token> hack <why>``.
"""

import builtins
import importlib
import json
import os
import sys
import types

SYNTAX_EXIT = 97  # the candidate does not compile
HARNESS_EXIT = 96  # the judge could not set itself up (not the candidate's fault)
MAX_MESSAGE = 1 << 26  # bytes of one encoded value
MAX_DEPTH = 200  # nesting of one encoded value
_CONTAINERS = (list, tuple, set, frozenset, dict)
_VALUE_TYPES = (bool, int, float, complex, str, bytes) + _CONTAINERS


class Refused(ValueError):
    """A message or value that is not plain data as `encode` writes it."""


class WorkerDied(RuntimeError):
    """The candidate's process ended (or closed its pipe) while the judge waited for an answer."""


# ----------------------------------------------------------------------------------------- codec
def encode(x, handles=None, depth=0):
    """``x`` as JSON-able data: ``None``, ``bool`` and ``str`` as themselves, everything else tagged
    (ints in hex, floats as ``float.hex``: exact, no digit limit, inf and nan included). Only objects
    of exactly these types are data; with ``handles`` (a dict) anything else becomes ``["r", id,
    type name, made_to_fool]``, else it raises `Refused`."""
    if depth > MAX_DEPTH:
        raise Refused(f"value nested more than {MAX_DEPTH} deep")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return ["i", format(x, "x")]
    if t is float:
        return ["f", x.hex()]
    if t is complex:
        return ["c", x.real.hex(), x.imag.hex()]
    if t is bytes:
        return ["b", x.hex()]
    if t is list or t is tuple or t is set or t is frozenset:
        tag = {list: "l", tuple: "t", set: "s", frozenset: "fs"}[t]
        return [tag, [encode(v, handles, depth + 1) for v in x]]
    if t is dict:
        return ["d", [[encode(k, handles, depth + 1), encode(v, handles, depth + 1)] for k, v in x.items()]]
    if handles is None:
        raise Refused(f"a {t.__name__} is not plain data")
    key = id(x)
    handles[key] = x
    return ["r", key, t.__name__, _made_to_fool(t)]


def _made_to_fool(t):
    """A subclass of a builtin value type, or a class that defines its own comparisons or truth."""
    try:
        if any(issubclass(t, b) for b in _VALUE_TYPES):
            return True
        return any(
            name in vars(k) for k in t.__mro__[:-1] for name in ("__eq__", "__ne__", "__bool__", "__len__")
        )
    except Exception:
        return True


def decode(v, remote=None, depth=0):
    """The value `encode` wrote, rebuilt from exactly the builtin types; ``["r", ...]`` handles become
    ``remote(...)`` (judge side) or are refused. Anything else raises `Refused`."""
    if depth > MAX_DEPTH:
        raise Refused(f"value nested more than {MAX_DEPTH} deep")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is not list or not v or type(v[0]) is not str:
        raise Refused(f"not an encoded value: {v!r:.80}")
    tag, n = v[0], len(v)
    try:
        if tag == "i" and n == 2 and type(v[1]) is str:
            return int(v[1], 16)
        if tag == "f" and n == 2 and type(v[1]) is str:
            return float.fromhex(v[1])
        if tag == "c" and n == 3 and type(v[1]) is str and type(v[2]) is str:
            return complex(float.fromhex(v[1]), float.fromhex(v[2]))
        if tag == "b" and n == 2 and type(v[1]) is str:
            return bytes.fromhex(v[1])
        if tag in ("l", "t", "s", "fs") and n == 2 and type(v[1]) is list:
            items = [decode(x, remote, depth + 1) for x in v[1]]
            return {"l": list, "t": tuple, "s": set, "fs": frozenset}[tag](items)
        if tag == "d" and n == 2 and type(v[1]) is list:
            out = {}
            for pair in v[1]:
                if type(pair) is not list or len(pair) != 2:
                    raise Refused("a dict entry is not a [key, value] pair")
                out[decode(pair[0], remote, depth + 1)] = decode(pair[1], remote, depth + 1)
            return out
        if tag == "r" and n == 4 and remote is not None and type(v[1]) is int and type(v[2]) is str:
            return remote(v[1], v[2], v[3] is not False)
    except (ValueError, TypeError, OverflowError) as e:  # bad digits, unhashable set member or key
        if isinstance(e, Refused):
            raise
        raise Refused(f"bad {tag!r} value: {e}") from None
    raise Refused(f"not an encoded value: {v!r:.80}")


def loads(line):
    """One message line -> value; malformed JSON, too deep or not plain data raise `Refused`."""
    if len(line) > MAX_MESSAGE:
        raise Refused(f"message longer than {MAX_MESSAGE} bytes")
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as e:
        raise Refused(f"message is not JSON: {str(e)[:200]}") from None


# ------------------------------------------------------------------------- the candidate's side
def _send(tx, msg):
    tx.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
    tx.flush()


def _worker(code, rx_fd, tx_fd):
    """The candidate's process: run the solution, then answer calls until the judge closes the pipe."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # its prints go to stderr; the judge's stdout is not reachable from here
    keep = sorted({0, 1, 2, rx_fd, tx_fd})
    for lo, hi in zip(keep, keep[1:] + [1 << 16]):
        os.closerange(lo + 1, hi)
    rx, tx = os.fdopen(rx_fd, "rb"), os.fdopen(tx_fd, "wb")
    g = {"__name__": "__main__", "__builtins__": builtins}
    load = rx.readline()
    if not load:
        os._exit(0)
    try:
        exec(code, g)
        setup = json.loads(load)[1]
        if setup:  # MBPP's test_setup_code: the solution may use what it defines, as in MBPP's own harness
            exec(compile(setup, "setup.py", "exec"), g)
    except BaseException as e:  # a crash at import time fails every test, it does not stop the judge
        _send(tx, ["load_error", type(e).__name__, _text(e)])
        os._exit(0)
    names = {}
    for k, v in list(g.items()):
        if isinstance(v, types.ModuleType):
            names[k] = ["module", getattr(v, "__name__", "")]
        elif callable(v) and not k.startswith("__"):
            names[k] = ["callable"]
    _send(tx, ["names", names])
    handles = {}
    while True:
        line = rx.readline()
        if not line:
            os._exit(0)
        _, target, args, kwargs = json.loads(line)
        try:
            fn = _resolve(g, target)
            result = fn(
                *[decode(a, lambda k, *_: handles[k]) for a in args],
                **{k: decode(a, lambda k, *_: handles[k]) for k, a in kwargs.items()},
            )
            reply = ["ret", encode(result, handles)]
        except BaseException as e:
            reply = ["exc", type(e).__name__, _text(e)]
        _send(tx, reply)


def _resolve(g, target):
    """A name of the solution; with ``method_of`` set, LeetCode style: the method of a new ``Solution``."""
    name, method_of = target
    if method_of and method_of in g and hasattr(g[method_of], name):
        return getattr(g[method_of](), name)
    if name not in g:
        raise NameError(f"the solution defines no {name!r}")
    return g[name]


def _text(e):
    try:
        return str(e)[:1000]
    except BaseException:
        return "<unprintable>"


# ------------------------------------------------------------------------------ the judge's side
class Remote:
    """A value the candidate returned that is not plain data: equal only to itself, no truth value."""

    __slots__ = ("key", "type_name", "made_to_fool")

    def __init__(self, key, type_name, made_to_fool):
        self.key, self.type_name, self.made_to_fool = key, type_name, made_to_fool

    def __bool__(self):
        raise TypeError(
            f"a {self.type_name} returned by the solution is not plain data: it has no truth value here"
        )

    def __repr__(self):
        return f"<{self.type_name} object of the solution>"


class Candidate:
    """The judge's end of the pipe; `call` one of the solution's functions with plain data."""

    def __init__(self, pid, rx, tx):
        self.pid, self.rx, self.tx = pid, rx, tx
        self.alive = True
        self.suspicious = []  # why the current test's failure counts as a hack
        self._remotes = {}

    def _remote(self, key, type_name, made_to_fool):
        r = self._remotes.get(key)
        if r is None:
            r = self._remotes[key] = Remote(key, type_name, made_to_fool)
        if made_to_fool:
            self.suspicious.append(f"returned a {type_name}, which is made to fool comparisons")
        return r

    def receive(self):
        line = self.rx.readline(MAX_MESSAGE + 1)
        if not line:
            self.alive = False
            raise WorkerDied("the solution's process ended")
        try:
            msg = loads(line)
            if type(msg) is not list or not msg or type(msg[0]) is not str:
                raise Refused(f"not a message: {line!r:.80}")
            return msg
        except Refused as e:
            self.suspicious.append(f"broke the protocol: {e}")
            raise

    def call(self, name, args, kwargs, method_of=None):
        if not self.alive:
            raise WorkerDied("the solution's process ended")
        request = [
            "call",
            [name, method_of],
            [_arg(a) for a in args],
            {str(k): _arg(v) for k, v in kwargs.items()},
        ]
        try:
            _send(self.tx, request)
        except OSError:  # a broken pipe: the candidate's process is gone
            self.alive = False
            raise WorkerDied("the solution's process ended") from None
        msg = self.receive()
        if msg[0] == "ret" and len(msg) == 2:
            try:
                return decode(msg[1], self._remote)
            except Refused as e:
                self.suspicious.append(f"broke the protocol: {e}")
                raise
        if msg[0] == "exc" and len(msg) == 3 and type(msg[1]) is str and type(msg[2]) is str:
            kind = getattr(builtins, msg[1], None)
            if isinstance(kind, type) and issubclass(kind, Exception) and kind is not AssertionError:
                raise kind(msg[2])  # a builtin exception the tests may expect, raised by the judge
            raise RuntimeError(f"the solution raised {msg[1]}: {msg[2]}")
        self.suspicious.append(f"broke the protocol: unexpected reply {msg!r:.80}")
        raise Refused("unexpected reply from the solution's process")


def _arg(v, depth=0):
    """What the tests pass: plain data, or handles the solution returned earlier."""
    t = type(v)
    if depth > MAX_DEPTH:
        raise TypeError(f"the tests pass a value nested more than {MAX_DEPTH} deep")
    if t is Remote:
        return ["r", v.key, v.type_name, False]
    if t is list or t is tuple or t is set or t is frozenset:
        tag = {list: "l", tuple: "t", set: "s", frozenset: "fs"}[t]
        return [tag, [_arg(x, depth + 1) for x in v]]
    if t is dict:
        return ["d", [[_arg(k, depth + 1), _arg(x, depth + 1)] for k, x in v.items()]]
    try:
        return encode(v)
    except Refused as e:
        raise TypeError(f"the tests pass a value that cannot cross to the solution: {e}") from None


class Proxy:
    """Stands in the tests' namespace for one function of the solution."""

    def __init__(self, candidate, name, method_of=None):
        self._candidate, self.__name__, self._method_of = candidate, name, method_of

    def __call__(self, *args, **kwargs):
        return self._candidate.call(self.__name__, args, kwargs, self._method_of)

    def __repr__(self):
        return f"<solution function {self.__name__}>"


def _no_dumping():
    """Forbid ptrace and /proc/<pid>/{mem,fd,environ} access to this process (and, before exec, to
    the candidate's, which starts as a fork of it)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _start(solution):
    try:
        code = compile(solution, "solution.py", "exec")
    except (SyntaxError, ValueError) as e:
        print("SyntaxError:", e, file=sys.stderr)
        sys.exit(SYNTAX_EXIT)
    try:
        _no_dumping()
    except OSError as e:
        print(f"harness: {e}", file=sys.stderr)
        sys.exit(HARNESS_EXIT)
    to_worker_r, to_worker_w = os.pipe()
    to_judge_r, to_judge_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(to_worker_w)
            os.close(to_judge_r)
            _worker(code, to_worker_r, to_judge_w)
        finally:
            os._exit(0)
    os.close(to_worker_r)
    os.close(to_judge_w)
    return Candidate(pid, os.fdopen(to_judge_r, "rb"), os.fdopen(to_worker_w, "wb"))


def _names(code):
    """Every global name a code object (and the functions, classes and lambdas in it) refers to."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _run_tests(cand, token, spec, names):
    ns = {"__name__": "__test__", "__builtins__": builtins}
    for part, where in ((spec.get("setup"), "setup.py"), (spec.get("prompt"), "prompt.py")):
        if part:
            exec(compile(part, where, "exec"), ns)  # the problem's own code: trusted helpers
    tests = [compile(t, f"test_{i}.py", "exec") for i, t in enumerate(spec["tests"])]
    used = set().union(*[_names(t) for t in tests]) if tests else set()
    entry = spec.get("entry_point")
    if entry is None:  # MBPP style: the tests call the solution's functions by name
        for name, kind in names.items():
            if name not in used or name in ns or hasattr(builtins, name):
                continue
            if kind[0] == "callable":
                ns[name] = Proxy(cand, name)
            elif kind[0] == "module" and kind[1]:
                try:
                    ns[name] = importlib.import_module(kind[1])  # our own import, not the solution's module
                except ImportError:
                    pass
    else:  # HumanEval style: only the entry point is the solution's; helpers come from the prompt
        ns[entry] = Proxy(cand, entry)
    for i, test in enumerate(tests):
        cand.suspicious = []
        try:
            exec(test, ns)
            verdict = "ok"
        except AssertionError:
            verdict = "fail"
        except Exception as e:  # one crashing test must not hide the others
            print(f"test {i}: {type(e).__name__}: {_text(e)}", file=sys.stderr)
            verdict = "error"
        if verdict != "ok" and cand.suspicious:
            print(f"test {i}: " + "; ".join(cand.suspicious), file=sys.stderr)
            verdict = "hack"
        print(token, i, verdict, flush=True)


def _run_call(cand, token, fn_name, args):
    cand.suspicious = []
    try:
        value = cand.call(fn_name, args, {}, method_of="Solution")
        if type(value) is Remote:
            raise Refused(f"returned a {value.type_name}, which is not plain data")
        if cand.suspicious:
            raise Refused("; ".join(cand.suspicious))
        print(token, "result", json.dumps(encode(value), separators=(",", ":")), flush=True)
    except Refused as e:
        print(token, "hack", e, flush=True)
    except Exception as e:
        print(f"{type(e).__name__}: {_text(e)}", file=sys.stderr)
        print(token, "error", type(e).__name__, flush=True)


def main(solution):
    """Start the candidate, then read ``<token>\\n<json spec>`` from stdin and judge."""
    cand = _start(solution)
    token = sys.stdin.readline().strip()
    spec = json.loads(sys.stdin.read())
    try:
        _send(cand.tx, ["load", spec.get("setup") or ""])
        first = cand.receive()
        if first[0] == "load_error":
            raise WorkerDied(f"the solution failed to load: {first[1:]}")
        if first[0] != "names" or len(first) != 2 or type(first[1]) is not dict:
            cand.suspicious.append(f"broke the protocol: {first!r:.80} instead of its names")
            raise Refused("no names")
    except (WorkerDied, OSError) as e:
        print(e, file=sys.stderr)
        sys.exit(1)
    except Refused:
        why = "; ".join(cand.suspicious)
        print(why, file=sys.stderr)
        lines = (
            ["hack " + why] if spec["mode"] == "call" else [f"{i} hack" for i in range(len(spec["tests"]))]
        )
        for line in lines:
            print(token, line, flush=True)
        sys.exit(1)
    names = {k: v for k, v in first[1].items() if type(k) is str and type(v) is list and v}
    if spec["mode"] == "call":
        _run_call(cand, token, spec["fn_name"], spec["args"])
    else:
        _run_tests(cand, token, spec, names)
    sys.stdout.flush()
    os._exit(0)  # do not wait for the candidate: the sandbox kills what is left
