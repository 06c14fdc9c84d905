"""Numbers as people read them: latencies in milliseconds with thousands separators, rates with their unit.
LoadGen's summaries give latencies in integer nanoseconds; the report converts them here and nowhere else."""

from __future__ import annotations

from typing import Any


def number(value: float | None, digits: int = 2) -> str:
    """``1234.5`` -> ``1,234.50``; small values keep three significant digits (``0.000123``)."""
    if value is None:
        return ""
    v = float(value)
    if v != 0 and abs(v) < 10 ** -digits:
        return f"{v:.3g}"
    return f"{v:,.{digits}f}"


def ms_from_ns(ns: Any) -> str:
    """A latency in ns (text or number) as milliseconds with separators and microsecond resolution."""
    try:
        v = float(ns) / 1e6
    except (TypeError, ValueError):
        return ""
    return f"{v:,.3f}"


def with_unit(text: str, unit: str) -> str:
    return f"{text} {unit}" if text and unit else text


def metric(value_text: str | None, unit: str) -> str:
    """A LoadGen metric (samples/s, tokens/s, or a latency in ns) as a readable value with its unit."""
    if not value_text:
        return ""
    try:
        v = float(value_text)
    except ValueError:
        return value_text
    if unit == "ns":
        return f"{ms_from_ns(v)} ms"
    return with_unit(number(v), unit)


def gib_from_bytes(value: Any) -> str:
    try:
        return f"{float(value) / 2**30:,.1f} GiB"
    except (TypeError, ValueError):
        return ""
