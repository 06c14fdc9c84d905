"""Which values a sweep measures, and where its knee is.

A plan is a function of the points measured so far: the next value to measure, or None when the sweep is done.
Nothing else is kept, so a resumed sweep (which reloads its points) continues exactly where it stopped.

- ``list``: the values given (``--qps 5,10,20`` or ``--concurrency 1,2,4``), in order;
- ``even``: ``--points`` values evenly spaced over ``[min, max]``;
- ``log2``: MLPerf Endpoints' split of ``[min, max]`` into log2 regions: the powers of two between them plus
  both ends, each region's midpoint added when ``--points`` asks for more;
- ``adaptive`` (default): doubling from ``min`` until the knee, two rates in a row that break their latency
  constraint, or ``max``; then bisection between the highest value that kept its constraints and the lowest that did not (or
  the knee and the value before it), until ``--points`` values were measured. A sweep that found its own range
  (``floor`` given) halves from ``min`` instead while its lowest value already broke its constraint.

A value whose runs were shorter than the rules' minimum query count (``meaningful: false``) is measured and shown,
but never named as the knee or the highest VALID value.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from mlharness.errors import MLHarnessError

PLANS = ("adaptive", "even", "log2")
KNEE_LATENCY_RATIO = 3.0  # the rate axis: p99 latency at this multiple of the lowest p99 below is steep
KNEE_FOLLOW = 0.9  # the rate axis: throughput under this fraction of the offered rate no longer follows it
KNEE_SCALING = 0.5  # the concurrency axis: throughput growing under half as fast as the concurrency
KNEE_PLATEAU = 0.85  # the concurrency axis: the knee is the first value within this fraction of the best


def parse_values(text: str, integer: bool, flag: str) -> list[float]:
    out: list[float] = []
    for part in text.split(","):
        part = part.strip()
        try:
            v = int(part) if integer else float(part)
        except ValueError:
            raise MLHarnessError(f"{flag} '{part}': expected {'an integer' if integer else 'a number'}") from None
        if not v > 0 or math.isinf(v):
            raise MLHarnessError(f"{flag} '{part}': must be above zero")
        if v in out:
            raise MLHarnessError(f"{flag} names {part} twice")
        out.append(v)
    return out


def planned(plan: str, lo: float, hi: float, points: int, integer: bool) -> list[float]:
    """The fixed values of the ``even`` and ``log2`` plans."""
    if plan == "even":
        raw = [lo] if points == 1 else [lo + (hi - lo) * i / (points - 1) for i in range(points)]
    else:
        raw = [lo] + [2.0 ** k for k in range(math.ceil(math.log2(lo)), math.floor(math.log2(hi)) + 1)] + [hi]
        raw = sorted(set(raw))
        while len(raw) < points:  # split the widest region (geometrically) until there are enough values
            def splits(j: int) -> bool:
                mid = math.sqrt(raw[j] * raw[j + 1])
                return not integer or round(mid) not in (round(raw[j]), round(raw[j + 1]))

            regions = [j for j in range(len(raw) - 1) if splits(j)]
            if not regions:
                break
            i = max(regions, key=lambda j: raw[j + 1] / raw[j])
            raw.insert(i + 1, math.sqrt(raw[i] * raw[i + 1]))
    values = sorted({round(v) if integer else round(v, 3) for v in raw})
    return [v for v in values if v > 0]


def by_value(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One aggregate per value over its repeats: min/median/max of its figures, sorted by value."""
    groups: dict[float, list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault(p["value"], []).append(p)
    out = []
    for value in sorted(groups):
        reps = groups[value]
        agg: dict[str, Any] = {"value": value, "repeats": len(reps), "valid": all(p["valid"] for p in reps),
                               "constraints_met": all(p.get("constraints_met", p["valid"]) for p in reps),
                               "meaningful": all(p.get("meaningful", True) for p in reps)}
        for key, get in (("throughput", lambda p: p.get("throughput")),
                         ("latency_p99_ms", lambda p: (p.get("latency_ms") or {}).get("p99")),
                         ("tokens_per_s", lambda p: p.get("tokens_per_s")),
                         ("goodput", lambda p: p.get("goodput"))):
            xs = [x for x in (get(p) for p in reps) if x is not None]
            agg[key] = ({"min": min(xs), "median": statistics.median(xs), "max": max(xs)} if xs else None)
        out.append(agg)
    return out


def _median(agg: dict[str, Any], key: str) -> float | None:
    return (agg.get(key) or {}).get("median")


def find_knee(aggs: list[dict[str, Any]], axis: str) -> dict[str, Any] | None:
    """The first value where the curve bends: on the rate axis, where throughput stops following the offered
    rate or the p99 latency has risen steeply; on the concurrency axis, where throughput stops growing with the
    number of requests in flight. Values too short to mean anything are left out."""
    aggs = [a for a in aggs if a.get("meaningful", True)]
    if axis == "target_qps":
        floor: tuple[float, float] | None = None  # the lowest p99 at a lower rate (noise only ever adds latency)
        for a in aggs:
            tput = _median(a, "throughput")
            if tput is not None and tput < KNEE_FOLLOW * a["value"]:
                return {"value": a["value"], "reason": f"throughput {tput:,.2f}/s is under {KNEE_FOLLOW:.0%} of "
                        f"the offered {a['value']:,.2f} QPS"}
            p99 = _median(a, "latency_p99_ms")
            if floor and p99 is not None and p99 >= KNEE_LATENCY_RATIO * floor[0]:
                return {"value": a["value"], "reason": f"p99 latency {p99:,.3f} ms is {p99 / floor[0]:.1f}x the "
                        f"{floor[0]:,.3f} ms at {floor[1]:,.2f} QPS"}
            if p99 is not None and (floor is None or p99 < floor[0]):
                floor = (p99, a["value"])
        return None
    key = "tokens_per_s" if any(_median(a, "tokens_per_s") for a in aggs) else "throughput"
    series = [(a["value"], _median(a, key)) for a in aggs if _median(a, key) is not None]
    if len(series) < 2:
        return None
    (v0, t0), (v1, t1) = series[-2], series[-1]
    best = max(t for _, t in series)
    # the curve has bent once the largest value no longer pays: throughput below the best seen, or growing under
    # half as fast as the concurrency over the last step
    if t1 >= best and t0 > 0 and (t1 / t0 - 1) / (v1 / v0 - 1) >= KNEE_SCALING:
        return None
    knee_v, knee_t = next((v, t) for v, t in series if t >= KNEE_PLATEAU * best)
    return {"value": knee_v, "reason": f"{key.replace('_', ' ')} {knee_t:,.2f} at concurrency {knee_v:g} is "
            f"{knee_t / best:.0%} of the best {best:,.2f}; larger values add little"}


def max_valid(aggs: list[dict[str, Any]]) -> float | None:
    """The highest value whose every repeat was VALID (and long enough to mean it)."""
    vals = [a["value"] for a in aggs if a["valid"] and a.get("meaningful", True)]
    return max(vals) if vals else None


def _double(v: float, hi: float, integer: bool) -> float:
    return min(hi, round(v * 2) if integer else round(v * 2, 3))


def adaptive_next(aggs: list[dict[str, Any]], axis: str, lo: float, hi: float, points: int,
                  integer: bool, floor: float | None = None) -> float | None:
    """The next value of the adaptive plan, from the values measured so far (see the module's docstring).

    A rate that broke its latency constraint ends the doubling only when the next doubling breaks it too: in a
    short run one late sample can break a p99 bound, and a sweep should not end on it."""
    if not aggs:
        return lo
    done = sorted(a["value"] for a in aggs)
    if len(done) >= points:
        return None
    knee = find_knee(aggs, axis)
    # the concurrency axis breaks the Server latency constraints by design (every query arrives at once)
    kept = {a["value"]: a["constraints_met"] or axis != "target_qps" for a in aggs}
    streak = []  # the highest values, all of which broke their constraints
    for v in reversed(done):
        if kept[v]:
            break
        streak.insert(0, v)
    chain = [lo]
    while len(chain) < len(done) and chain[-1] < hi:
        chain.append(_double(chain[-1], hi, integer))
    first = done[0]
    if floor is not None and (not kept[first] or (knee is not None and knee["value"] == first)):
        half = round(first / 2) if integer else round(first / 2, 3)
        if floor <= half < first and half not in done:  # the start was already past the knee: bracket it below
            return half
    growing = done == chain[:len(done)]
    if growing and knee is None and len(streak) <= 1 and done[-1] < hi:
        return _double(done[-1], hi, integer)
    # bisect: between the highest value that kept its constraints and the lowest of the broken ones above it
    # (the knee and the value below it when none broke them)
    uppers = ([streak[0]] if len(streak) >= 1 else []) + ([knee["value"]] if knee else [])
    if not uppers:
        return None
    upper = min(uppers)
    below = [v for v in done if v < upper]
    if not below:
        return None
    lower = max(below)
    mid = round(math.sqrt(lower * upper)) if integer else round(math.sqrt(lower * upper), 3)
    if mid in done or mid <= lower or mid >= upper:
        return None
    return mid


def next_value(plan: str, values: list[float], aggs: list[dict[str, Any]], axis: str, lo: float, hi: float,
               points: int, integer: bool, floor: float | None = None) -> float | None:
    done = {a["value"] for a in aggs}
    if plan in ("list", "even", "log2"):
        order = values if plan == "list" else planned(plan, lo, hi, points, integer)
        return next((v for v in order if v not in done), None)
    if plan == "adaptive":
        return adaptive_next(aggs, axis, lo, hi, points, integer, floor)
    raise MLHarnessError(f"--plan '{plan}': expected one of {', '.join(PLANS)}")

