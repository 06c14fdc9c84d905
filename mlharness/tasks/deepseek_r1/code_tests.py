"""LiveCodeBench's verdicts, as ``lcb_runner.evaluation.testing_util.run_test`` decides them (the code path the
official deepseek-r1 ``eval_accuracy.py`` takes), decided in the grader's process from what the sandboxed program
produced (:mod:`.code_runner` runs it; the expected outputs never reach it).

- stdio problems: the output and the expected text are stripped and split into lines, each line stripped; the
  line counts must agree and every line be equal, or equal as a list of ``Decimal`` numbers.
- functional problems: the return value (decoded from its tagged form, so a tuple is a tuple, a set a set) must
  equal the JSON expected value; a tuple result counts as a list.

Results: ``True`` per passed test, -2 wrong answer, -3 time limit, -4 runtime error (LiveCodeBench's codes); the
first failing test ends the run.
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from typing import Any

WRONG, TIMEOUT, ERROR = -2, -3, -4
CODES = {"timeout": TIMEOUT, "error": ERROR}


def stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def as_decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(x) for x in line.split()]
    except Exception:  # noqa: BLE001 - any text that is not numbers
        return None


def same_output(got: str, expected: str) -> bool:
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


class Unrepresentable:
    """A value the program returned that has no data form (an object of its own class): equals nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<{self.name}>"


def decode(data: Any) -> Any:
    """The Python value :func:`.code_runner.encode` sent; never executes anything."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    tag, value = data.get("$"), data.get("v")
    if tag == "int":
        return int(value, 16)
    if tag == "float":
        return float(value)
    if tag == "tuple":
        return tuple(decode(v) for v in value)
    if tag in ("set", "frozenset"):
        items = [decode(v) for v in value]
        try:
            return set(items) if tag == "set" else frozenset(items)
        except TypeError:
            return Unrepresentable(tag)
    if tag == "dict":
        try:
            return {decode(k): decode(v) for k, v in value}
        except TypeError:
            return Unrepresentable("dict")
    if tag == "bytes":
        return bytes.fromhex(value)
    if tag == "complex":
        return complex(decode(value[0]), decode(value[1]))
    if tag == "fraction":
        return Fraction(decode(value[0]), decode(value[1]))
    if tag == "decimal":
        return Decimal(value)
    return Unrepresentable(str(value))


def verdict(reply: Any, expected: str, functional: bool) -> bool | int:
    """One test's verdict from the sandbox's ``reply`` for it: True, or LiveCodeBench's failure code."""
    if not isinstance(reply, dict):
        return ERROR
    status = reply.get("status")
    if status != "ok":
        return CODES.get(status, ERROR)
    if not functional:
        output = reply.get("output")
        return True if isinstance(output, str) and same_output(output, expected) else WRONG
    try:
        got = decode(reply.get("value"))
        want = json.loads(expected)
    except (TypeError, ValueError, AttributeError, IndexError, ArithmeticError, RecursionError):
        return WRONG
    if isinstance(got, tuple):
        got = list(got)
    try:
        return True if got == want else WRONG
    except RecursionError:
        return WRONG
