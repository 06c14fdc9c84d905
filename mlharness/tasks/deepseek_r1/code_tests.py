"""LiveCodeBench's test run of one generated program, as ``lcb_runner.evaluation.testing_util.run_test`` does it
(the code path the official deepseek-r1 ``eval_accuracy.py`` takes), executed *inside* the sandbox: standard
library only, run by :mod:`.sandbox_boot` with the global ``PAYLOAD`` (``code``, ``inputs``, ``outputs``,
``fn_name``, ``timeout``), and never imported for its side effects (the run happens only under ``__sandbox__``).

- stdin problems (no ``fn_name``): a trailing ``if __name__ == '__main__':`` block is unwrapped; the program's
  imports are kept at top level and the rest becomes the body of one function, after LiveCodeBench's preamble of
  ``from math import *``-style imports. Each test calls the function with ``sys.stdin`` (``input``, ``read``,
  ``readline``, ``readlines``, ``buffer``) and ``open`` serving the test's input, and ``sys.stdout`` captured. The
  output and the expected text are stripped and split into lines, each line stripped; the line counts must agree
  and every line be equal, or equal as a list of ``Decimal`` numbers.
- functional problems (LeetCode, ``fn_name`` set): the preamble and the program are executed, ``Solution()``
  made when the program has ``class Solution``; each test's input lines are JSON arguments, its output JSON; a
  tuple result counts as a list.

Each test has ``timeout`` seconds (``SIGALRM``); the first failing test ends the run. Results: ``True`` per
passed test, -2 wrong answer, -3 time limit, -4 runtime error (LiveCodeBench's codes).
"""

import ast
import json
import signal
import sys
from decimal import Decimal
from io import StringIO
from types import ModuleType
from unittest import mock

PREAMBLE_MODULES = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
                    "statistics", "itertools", "functools", "operator", "io", "sys", "json")
PREAMBLE = ("".join(f"from {m} import *\n" for m in (*PREAMBLE_MODULES[:15], "json", "builtins", "typing"))
            + "".join(f"import {m}\n" for m in PREAMBLE_MODULES) + "sys.setrecursionlimit(50000)\n")
RESULT_PREFIX = "MLHARNESS-SANDBOX-RESULT "


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


def load(code, timeout):
    signal.alarm(timeout)
    try:
        module = ModuleType("tmp_sol", "")
        exec(code, module.__dict__)
        target = module.Solution() if "class Solution" in code else module
    finally:
        signal.alarm(0)
    return target


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


def stripped_lines(text):
    return [line.strip() for line in text.strip().split("\n")]


def as_decimals(line):
    try:
        return [Decimal(x) for x in line.split()]
    except Exception:
        return None


def same_output(got, expected):
    got_lines, want_lines = stripped_lines(got), stripped_lines(expected)
    if len(got_lines) != len(want_lines):
        return False
    for g, w in zip(got_lines, want_lines, strict=False):
        if g == w:
            continue
        gd, wd = as_decimals(g), as_decimals(w)
        if gd is None or wd is None or gd != wd:
            return False
    return True


def failure(exc):
    return -3 if "timeoutexception" in repr(exc).lower() or isinstance(exc, TestTimeout) else -4


def run_stdio(code, inputs, outputs, timeout):
    func = getattr(load(as_function(unwrap_main(code)), timeout), "wrapped_function", None)
    if func is None:
        return [-4]
    results = []
    for given, expected in zip(inputs, outputs, strict=False):
        real_stdout, sys.stdout = sys.stdout, StringIO()
        signal.alarm(timeout)
        try:
            call_with_stdin(func, given)
            signal.alarm(0)
        except BaseException as e:  # noqa: BLE001 - the program's failure is its verdict
            signal.alarm(0)
            sys.stdout = real_stdout
            if isinstance(e, (KeyboardInterrupt, GeneratorExit)):
                raise
            return [*results, failure(e)]
        finally:
            signal.alarm(0)
            captured, sys.stdout = sys.stdout, real_stdout
        if not same_output(captured.getvalue() if isinstance(captured, StringIO) else "", expected):
            return [*results, -2]
        results.append(True)
    return results


def run_functional(code, inputs, outputs, fn_name, timeout):
    target = load(PREAMBLE + "\n\n" + code, timeout)
    method = getattr(target, fn_name, None)
    if method is None:
        return [-4]
    args_list = [[json.loads(line) for line in given.split("\n")] for given in inputs]
    expected_list = [json.loads(out) for out in outputs]
    results = []
    for args, expected in zip(args_list, expected_list, strict=False):
        signal.alarm(timeout)
        try:
            got = method(*args)
            signal.alarm(0)
        except Exception as e:
            signal.alarm(0)
            return [*results, failure(e)]
        finally:
            signal.alarm(0)
        if isinstance(got, tuple):
            got = list(got)
        if not got == expected:
            return [*results, -2]
        results.append(True)
    return results


def run(payload):
    signal.signal(signal.SIGALRM, _alarm)
    sys.set_int_max_str_digits(50000)  # as LiveCodeBench's evaluator sets it
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    timeout = int(payload["timeout"])
    try:
        if payload.get("fn_name"):
            results = run_functional(payload["code"], payload["inputs"], payload["outputs"], payload["fn_name"],
                                     timeout)
        else:
            results = run_stdio(payload["code"], payload["inputs"], payload["outputs"], timeout)
    except BaseException as e:  # noqa: BLE001 - anything the program raises while loading fails it
        if isinstance(e, KeyboardInterrupt):
            raise
        results = [-4]
    return results


if __name__ == "__sandbox__":
    _report_fd = sys.stdout.fileno()
    _results = run(PAYLOAD)  # noqa: F821 - set by sandbox_boot
    _line = RESULT_PREFIX + json.dumps({"results": _results, "isolation": PAYLOAD["isolation"]}) + "\n"  # noqa: F821
    import os

    os.write(_report_fd, _line.encode())
