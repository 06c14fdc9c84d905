"""Runs one generated program on test inputs, *inside* the sandbox, and answers with what it produced: never a
verdict. Started by :mod:`.sandbox` as ``python -I -S -c <this file's text> [UID]`` (standard library only,
nothing of mlharness is imported) and spoken to in frames (a 4-byte big-endian length, then JSON) over its stdin
and stdout, which it moves to other descriptors before the program runs (the program's own fds 0 and 1 are
``/dev/null``; what it prints is captured from ``sys.stdout`` as LiveCodeBench captures it).

Every request carries the grader's ``nonce``, and the reply to it echoes it: bytes the program writes into the
channel on its own (framed answers written blindly to every descriptor) are no reply, and fail it.

1. ``{"code", "fn_name", "timeout"}`` → the program is loaded as LiveCodeBench's ``run_test`` loads it (a stdio
   program becomes a function after its preamble of imports; a functional one is executed and ``Solution()`` made)
   → ``{"status": "ok"}``, or ``"error"`` / ``"timeout"``.
2. then for each ``{"input": ...}`` → ``{"status": "ok", "output": <captured text>}`` (stdio) or ``{"status":
   "ok", "value": <the return value>}`` (functional), or ``"error"`` / ``"timeout"``.

The expected outputs never reach this process: the grader compares (:mod:`.code_tests`). A return value is sent
as data that cannot execute: JSON with tags for the types JSON lacks (tuple, set, dict with any keys, bytes,
complex, Fraction, Decimal, big integers, non-finite floats); an object of any other type is sent as its type's
name and equals nothing. Subclasses of the built-in types go as their base type, so an ``__eq__`` of the
program's never decides a comparison.

As root the sandbox starts it with the capability to change uid, and its first act is to drop to the run's own
unprivileged uid (``argv[1]``), under which the process limit counts this run's processes only.
"""

import ast
import json
import os
import signal
import struct
import sys
from io import StringIO
from types import ModuleType
from unittest import mock

PREAMBLE_MODULES = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
                    "statistics", "itertools", "functools", "operator", "io", "sys", "json")
PREAMBLE = ("".join(f"from {m} import *\n" for m in (*PREAMBLE_MODULES[:15], "json", "builtins", "typing"))
            + "".join(f"import {m}\n" for m in PREAMBLE_MODULES) + "sys.setrecursionlimit(50000)\n")
MAX_NODES = 1_000_000  # values larger than this are sent as unrepresentable


class TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise TestTimeout


def unwrap_main(code):
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            code = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:
        pass
    return code


def as_function(code):
    try:
        tree = ast.parse(code)
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        body = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        func = ast.FunctionDef(name="wrapped_function", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                                            kw_defaults=[], defaults=[]),
                               body=body, decorator_list=[], lineno=-1)
        return PREAMBLE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(func)
    except Exception:
        return code


class FakeBuffer:
    def __init__(self, text):
        self.data = text.encode("utf-8")

    def read(self, *args):
        return self.data

    def readline(self, *args):
        return self.data.split(b"\n")[0] + b"\n"


class FakeStdin:
    def __init__(self, text):
        self.text = text
        self.stream = StringIO(text)
        self.buffer = FakeBuffer(text)

    def read(self, *args):
        return self.text

    def readline(self, *args):
        return self.stream.readline(*args)

    def readlines(self, *args):
        return self.text.split("\n")

    def __getattr__(self, name):
        return getattr(self.stream, name)


def call_with_stdin(func, text):
    if isinstance(text, list):
        text = "\n".join(text)
    lines = iter(text.split("\n"))
    with mock.patch("builtins.open", mock.mock_open(read_data=text)), \
            mock.patch("sys.stdin", FakeStdin(text)), \
            mock.patch("sys.stdin.readline", lambda *a: next(lines)), \
            mock.patch("sys.stdin.readlines", lambda *a: text.split("\n")), \
            mock.patch("sys.stdin.read", lambda *a: text):
        try:
            return func()
        except SystemExit:
            return None


def failure(exc):
    return "timeout" if "timeoutexception" in repr(exc).lower() or isinstance(exc, TestTimeout) else "error"


def encode(value, budget=None):
    """``value`` as tagged JSON data (see the module's text)."""
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        raise OverflowError("too large")
    if value is None or isinstance(value, bool):
        return value if value is None else bool(value)
    if isinstance(value, int):
        value = int(value)
        return value if abs(value) < 10 ** 300 else {"$": "int", "v": hex(value)}
    if isinstance(value, float):
        value = float(value)
        return value if value == value and abs(value) != float("inf") else {"$": "float", "v": repr(value)}
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list):
        return [encode(v, budget) for v in value]
    if isinstance(value, tuple):
        return {"$": "tuple", "v": [encode(v, budget) for v in value]}
    if isinstance(value, (set, frozenset)):
        kind = "frozenset" if isinstance(value, frozenset) else "set"
        return {"$": kind, "v": [encode(v, budget) for v in value]}
    if isinstance(value, dict):
        return {"$": "dict", "v": [[encode(k, budget), encode(v, budget)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"$": "bytes", "v": bytes(value).hex()}
    if isinstance(value, complex):
        return {"$": "complex", "v": [encode(value.real, budget), encode(value.imag, budget)]}
    name = type(value).__module__ + "." + type(value).__qualname__
    if name == "fractions.Fraction":
        return {"$": "fraction", "v": [encode(value.numerator, budget), encode(value.denominator, budget)]}
    if name == "decimal.Decimal":
        return {"$": "decimal", "v": str(value)}
    return {"$": "opaque", "v": name}


class Channel:
    """Frames over the two descriptors the sandbox handed over."""

    def __init__(self, read_fd, write_fd):
        self.read_fd, self.write_fd = read_fd, write_fd

    def _read_exact(self, n):
        chunks = []
        while n:
            chunk = os.read(self.read_fd, n)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self):
        (size,) = struct.unpack(">I", self._read_exact(4))
        return json.loads(self._read_exact(size))

    def send(self, message):
        try:
            data = json.dumps(message).encode("utf-8", "surrogatepass")
        except (OverflowError, ValueError, RecursionError):
            data = json.dumps({"status": "ok", "value": {"$": "opaque", "v": "unencodable"}}).encode()
        data = struct.pack(">I", len(data)) + data
        while data:
            data = data[os.write(self.write_fd, data):]


def load(code, fn_name, timeout):
    signal.alarm(timeout)
    try:
        module = ModuleType("tmp_sol", "")
        if fn_name:
            exec(PREAMBLE + "\n\n" + code, module.__dict__)
            target = module.Solution() if "class Solution" in code else module
            return getattr(target, fn_name, None)
        exec(as_function(unwrap_main(code)), module.__dict__)
        return getattr(module, "wrapped_function", None)
    finally:
        signal.alarm(0)


def run_stdio(func, given, timeout):
    real_stdout, sys.stdout = sys.stdout, StringIO()
    signal.alarm(timeout)
    try:
        call_with_stdin(func, given)
        signal.alarm(0)
    except BaseException as e:  # noqa: BLE001 - the program's failure is its answer
        signal.alarm(0)
        sys.stdout = real_stdout
        if isinstance(e, (KeyboardInterrupt, GeneratorExit)):
            raise
        return {"status": failure(e)}
    finally:
        signal.alarm(0)
        captured, sys.stdout = sys.stdout, real_stdout
    return {"status": "ok", "output": captured.getvalue() if isinstance(captured, StringIO) else ""}


def run_functional(method, given, timeout):
    args = [json.loads(line) for line in given.split("\n")]
    signal.alarm(timeout)
    try:
        got = method(*args)
        signal.alarm(0)
    except Exception as e:
        signal.alarm(0)
        return {"status": failure(e)}
    finally:
        signal.alarm(0)
    try:
        return {"status": "ok", "value": encode(got)}
    except (OverflowError, RecursionError):
        return {"status": "ok", "value": {"$": "opaque", "v": "too large"}}


def serve(channel):
    header = channel.receive()
    timeout, fn_name, nonce = int(header["timeout"]), header.get("fn_name"), header.get("nonce")
    try:
        target = load(header["code"], fn_name, timeout)
    except BaseException as e:  # noqa: BLE001 - anything the program raises while loading fails it
        if isinstance(e, KeyboardInterrupt):
            raise
        sys.stderr.write(f"the program did not load: {type(e).__name__}: {e}\n")
        channel.send({"status": "error", "nonce": nonce})
        return
    if target is None:
        channel.send({"status": "error", "nonce": nonce})
        return
    channel.send({"status": "ok", "nonce": nonce})
    while True:
        try:
            request = channel.receive()
        except EOFError:
            return
        run = run_functional if fn_name else run_stdio
        channel.send({**run(target, request["input"], timeout), "nonce": request.get("nonce")})


def main():
    if len(sys.argv) > 1:  # started as root: become the run's own uid before anything else
        uid = int(sys.argv[1])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    read_fd, write_fd = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    signal.signal(signal.SIGALRM, _alarm)
    sys.set_int_max_str_digits(50000)  # as LiveCodeBench's evaluator sets it
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    serve(Channel(read_fd, write_fd))


if __name__ == "__main__":
    main()
