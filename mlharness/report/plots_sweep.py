"""The curves of a load sweep: latency percentiles against throughput (VALID and INVALID points told apart,
the knee marked), tokens/s per user against tokens/s with the Pareto front, and goodput against offered load."""

from __future__ import annotations

from typing import Any

from mlharness.report.plots import LEGEND_OUTSIDE, figure, log_axis, plain, svg
from mlharness.report.sweep import LATENCY_KEYS, Sweep

VALID_STYLE = {"marker": "o", "facecolors": "#17702b", "edgecolors": "#17702b"}
INVALID_STYLE = {"marker": "X", "facecolors": "#b3261e", "edgecolors": "#b3261e"}


def _mark_validity(ax: Any, s: Sweep, xs: list[float], ys: list[float], points: list[dict[str, Any]]) -> None:
    for valid, style, label in ((True, VALID_STYLE, "VALID"), (False, INVALID_STYLE, "INVALID")):
        sel = [(x, y) for x, y, p in zip(xs, ys, points, strict=True) if bool(p.get("valid")) is valid]
        if sel:
            ax.scatter([x for x, _ in sel], [y for _, y in sel], s=36, zorder=3, label=label, **style)
    knee = [(x, y) for x, y, p in zip(xs, ys, points, strict=True) if s.is_knee(p)]
    if knee:
        ax.scatter([x for x, _ in knee], [y for _, y in knee], s=180, facecolors="none", edgecolors="#1f4e9c",
                   linewidths=2, zorder=4, label="knee")


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) else float("nan")


def latency_vs_throughput(s: Sweep) -> str | None:
    pts = sorted((p for p in s.points if isinstance(p.get("throughput"), int | float) and p.get("latency_ms")),
                 key=lambda p: p["throughput"])
    if not pts:
        return None
    fig, ax = figure()
    xs = [float(p["throughput"]) for p in pts]
    for key in LATENCY_KEYS:
        ys = [(p["latency_ms"] or {}).get(key) for p in pts]
        if any(isinstance(y, int | float) for y in ys):
            ax.plot(xs, [_num(y) for y in ys], label=key, alpha=0.8)
    p99 = [_num((p["latency_ms"] or {}).get("p99")) for p in pts]
    _mark_validity(ax, s, xs, p99, pts)
    ax.set_xlabel("throughput (sessions/s)" if s.sessions else "throughput (samples/s)")
    ax.set_ylabel("session latency, end to end (ms)" if s.sessions else "latency (ms)")
    log_axis(ax)
    ax.set_title("Latency percentiles against throughput (markers on p99)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(**LEGEND_OUTSIDE)
    return svg(fig)


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (higher is better on both), by ascending x."""
    front = []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return sorted(front)


def tokens_per_user(s: Sweep) -> str | None:
    pts = [p for p in s.points if isinstance(p.get("tokens_per_s"), int | float)
           and isinstance(p.get("tokens_per_s_per_user"), int | float)]
    if not pts:
        return None
    fig, ax = figure()
    xs = [float(p["tokens_per_s"]) for p in pts]
    ys = [float(p["tokens_per_s_per_user"]) for p in pts]
    front = pareto_front(list(zip(xs, ys, strict=True)))
    ax.plot([x for x, _ in front], [y for _, y in front], color="#555", linestyle="--", label="Pareto front")
    _mark_validity(ax, s, xs, ys, pts)
    for x, y, p in zip(xs, ys, pts, strict=True):
        ax.annotate(plain(p.get("label") or p.get("value")), (x, y), fontsize="xx-small", xytext=(3, 3),
                    textcoords="offset points")
    ax.set_xlabel("throughput (tokens/s)")
    ax.set_ylabel("tokens/s per user")
    ax.set_title("Interactivity against throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(**LEGEND_OUTSIDE)
    return svg(fig)


def goodput_vs_load(s: Sweep) -> str | None:
    pts = sorted((p for p in s.points if isinstance(p.get("goodput"), int | float)
                  and isinstance(p.get("value"), int | float)), key=lambda p: p["value"])
    if not pts:
        return None
    fig, ax = figure()
    xs = [float(p["value"]) for p in pts]
    ys = [float(p["goodput"]) for p in pts]
    ax.plot(xs, ys, color="#555", label="goodput")
    thr = [(float(p["value"]), float(p["throughput"])) for p in pts if isinstance(p.get("throughput"), int | float)]
    if thr:
        ax.plot([x for x, _ in thr], [y for _, y in thr], color="#999", linestyle=":", label="throughput")
    _mark_validity(ax, s, xs, ys, pts)
    ax.set_xlabel(plain(s.axis_label))
    ax.set_ylabel("per second (within the SLO for goodput)")
    ax.set_title("Goodput against offered load")
    ax.grid(True, alpha=0.3)
    ax.legend(**LEGEND_OUTSIDE)
    return svg(fig)
