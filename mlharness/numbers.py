"""The one check of every number a user gives: a flag, a manifest key or a trace row's field.

Durations, rates, delays, timestamps, timeouts, counts and worker numbers all pass through :func:`check` (or
:func:`problem`, where a caller words the error itself): the value must be a number of the right kind (a whole
number where one is asked; never a bool), finite, and within a stated range. The error is a :class:`NumberError`
(exit 2) that names where the value came from, a :class:`Source`:

- :func:`flag`: ``--session-rate: must be a finite number, got inf``
- :func:`manifest`: ``m.yaml: field 'inputs[0].parameters.stages[1].timeout_s': must be ... got nan``
- :func:`trace`: ``t.jsonl:17: field 'delay_seconds': must be <= 604800 s, got 1000000000000``

Each source raises a subclass of the error its kind already raised (``SettingsError``, ``ManifestError``,
``DatasetError``), so callers that catch those keep working, and every one of them is a :class:`NumberError` with
the same wording after the place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mlharness.errors import DatasetError, ManifestError, MLHarnessError, SettingsError

WEEK_S = 7 * 24 * 3600.0
MAX_TIMEOUT_S = WEEK_S  # a stage's or a hook's deadline
MAX_RECORDED_S = WEEK_S  # the longest a replay's recorded timing (starts and think times) may span
MAX_WORKERS = 1024  # threads a stage or a SUT starts; more is a typo, and can abort the process
MAX_TURNS = 1000  # turns of one session: each turn resends the whole history, so the work grows with its square


class NumberError(MLHarnessError):
    """A number out of type or range; ``source`` says where it came from, ``problem`` what is wrong."""

    def __init__(self, source: Source, problem: str):
        self.source = source
        self.problem = problem
        MLHarnessError.__init__(self, f"{source.where}: {problem}")


class FlagNumberError(NumberError, SettingsError):
    """A command-line flag's number."""


class ManifestNumberError(NumberError, ManifestError):
    """A manifest key's number."""

    def __init__(self, source: Source, problem: str):
        self.path, self.field = source.path, source.field
        NumberError.__init__(self, source, problem)


class TraceNumberError(NumberError, DatasetError):
    """A trace row's number."""

    def __init__(self, source: Source, problem: str):
        self.path, self.line, self.field = source.path, source.line, source.field
        NumberError.__init__(self, source, problem)


@dataclass(frozen=True)
class Source:
    """Where a number came from, as an error names it."""

    where: str
    error: type[NumberError] = NumberError
    path: str | None = None
    line: int | None = None
    field: str | None = None

    def fail(self, problem: str) -> NumberError:
        return self.error(self, problem)


def flag(name: str) -> Source:
    return Source(name, FlagNumberError, field=name)


def manifest(path: Any, field: str) -> Source:
    where = f"{path if path is not None else '<manifest>'}: field '{field}'"
    return Source(where, ManifestNumberError, None if path is None else str(path), field=field)


def trace(path: Any, line: int | None, field: str, error: type[NumberError] = TraceNumberError) -> Source:
    where = str(path) if line is None else f"{path}:{line}"
    return Source(f"{where}: field '{field}'", error, str(path), line, field)


def fmt(value: Any) -> str:
    """A number as errors show it: 3 rather than 3.0."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value) if isinstance(value, int | float) else repr(value)


def problem(value: Any, *, minimum: float | None = None, maximum: float | None = None, integer: bool = False,
            above: bool = False, zero_ok: bool = False, unit: str = "", why: str = "", low_why: str = "",
            high_why: str = "") -> str | None:
    """What is wrong with ``value`` ('must be > 0 s, got 0'), or None.

    ``minimum``/``maximum``: the range (``above``: the value must exceed ``minimum``); ``integer``: a whole number
    (an int, or a float without a fraction); ``zero_ok``: 0 is allowed besides the range (off, no limit); ``unit``
    follows the limits (" s"); ``why`` is appended to a range error, ``low_why``/``high_why`` to one end's."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be {'a whole number' if integer else 'a number'}, got {value!r}"
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if zero_ok and value == 0:
        return None
    if integer and value != int(value):
        return f"must be a whole number, got {fmt(value)}"

    def notes(end: str) -> str:
        said = "; ".join(n for n in (end, why) if n)
        return f" ({said})" if said else ""

    if minimum is not None and (value < minimum or (above and value == minimum)):
        rule = f"> {fmt(minimum)}" if above else f">= {fmt(minimum)}"
        zero = " (or 0)" if zero_ok else ""
        return f"must be {rule}{unit}{zero}, got {fmt(value)}{notes(low_why)}"
    if maximum is not None and value > maximum:
        return f"must be <= {fmt(maximum)}{unit}, got {fmt(value)}{notes(high_why)}"
    return None


def check(value: Any, source: Source | str, **rules: Any) -> Any:
    """``value`` if it is a number within ``rules`` (those of :func:`problem`), else the source's NumberError.
    A whole number asked for comes back as an ``int``; a plain string ``source`` is taken as the place's name."""
    said = problem(value, **rules)
    if said is not None:
        raise (Source(source) if isinstance(source, str) else source).fail(said)
    return int(value) if rules.get("integer") else value


def parse(text: Any, source: Source | str, *, integer: bool = False, **rules: Any) -> Any:
    """A number written as text (a flag's value), then :func:`check`-ed: ``--session-rate inf`` is refused as
    ``--session-rate``'s, not as whatever setting it later becomes."""
    src = Source(source) if isinstance(source, str) else source
    raw = str(text).strip()
    try:
        value: Any = int(raw) if integer else float(raw)
    except ValueError:
        raise src.fail(f"must be {'a whole number' if integer else 'a number'}, got {raw!r}") from None
    return check(value, src, integer=integer, **rules)


def argtype(name: str, *, integer: bool = False, **rules: Any) -> Any:
    """An argparse ``type=`` for flag ``name``: the value parsed and checked, an error naming the flag (exit 2)."""

    def convert(text: str) -> Any:
        return parse(text, flag(name), integer=integer, **rules)

    convert.__name__ = "whole number" if integer else "number"
    return convert
