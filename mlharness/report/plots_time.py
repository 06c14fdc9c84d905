"""Figures of generative runs and of runs over time: the distribution of the time to first token (TTFT) and of
the time per output token (TPOT), and the throughput a traced run reached second by second.

LoadGen's summary holds the TTFT and TPOT minimum, percentiles (50 to 99.9) and maximum, not per-sample values,
so the distributions are drawn as cumulative curves through those quantiles, with the Server limit marked."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from mlharness.report.collect import Run
from mlharness.report.plots import LEGEND_OUTSIDE, figure, group_title, plain, svg

TOKEN_KINDS = (("TTFT", "time to first token"), ("TPOT", "time per output token"))


def token_distributions(runs: list[Run]) -> str | None:
    """TTFT and TPOT side by side: fraction of samples at or under each latency, one curve per run (of one
    model and scenario)."""
    runs = [r for r in runs if r.mode == "performance" and r.token_quantiles("TTFT")]
    if not runs:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.4), dpi=100)
    axes = fig.subplots(1, 2)
    for ax, (kind, title) in zip(axes, TOKEN_KINDS, strict=True):
        limits, top = set(), 0.0
        for r in runs:
            q = r.token_quantiles(kind)
            if not q:
                continue
            ax.step([v / 1e6 for _, v in q], [f for f, _ in q], where="post", marker="o", markersize=3,
                    label=plain(r.rel))
            top = max(top, q[-1][1] / 1e6)
            limit = r.token_limit_ns(kind)
            if limit is not None:
                limits.add(limit / 1e6)
        for limit in sorted(limits):
            if limit <= 2 * top:  # the limit in view, the distribution still readable
                ax.axvline(limit, color="#b3261e", linestyle="--", linewidth=1)
                ax.annotate(f"p99 limit {limit:,.0f} ms", (limit, 0.05), color="#b3261e", fontsize="x-small",
                            rotation=90, ha="right")
            else:
                ax.annotate(f"p99 limit {limit:,.6g} ms (off the scale)", (0.98, 0.04), xycoords="axes fraction",
                            ha="right", color="#b3261e", fontsize="x-small")
        ax.set_xlabel(f"{kind}: {title} (ms)")
        ax.set_ylabel("fraction of samples ≤ x")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
    axes[1].legend(**LEGEND_OUTSIDE)
    fig.suptitle(plain(f"{group_title(runs)}: token latency distributions (LoadGen's min, p50 ... p99.9, max)"),
                 fontsize="medium")
    return svg(fig)


def completions_over_time(events: list[dict[str, Any]], bins: int = 20) -> tuple[list[float], list[float]]:
    """(bin start in s, samples/s) of a trace's ``complete`` spans, each span's ``samples`` counted at its end,
    in ``bins`` equal bins from the first completion to the last."""
    done = [((float(e["ts"]) + float(e.get("dur", 0))) / 1e6, float((e.get("args") or {}).get("samples", 1)))
            for e in events if e.get("ph") == "X" and e.get("cat") == "model" and e.get("name") == "complete"]
    if len(done) < 3:
        return [], []
    t0, t1 = min(t for t, _ in done), max(t for t, _ in done)
    width = (t1 - t0) / bins
    if width <= 0:
        return [], []
    counts: dict[int, float] = defaultdict(float)
    for t, n in done:
        counts[min(int((t - t0) / width), bins - 1)] += n
    return [i * width for i in range(bins)], [counts.get(i, 0.0) / width for i in range(bins)]


def throughput_over_time(per_run: dict[str, tuple[list[float], list[float]]], group: str = "") -> str | None:
    """Completed samples per second over each traced run of one model and scenario (20 bins per run)."""
    per_run = {k: v for k, v in per_run.items() if v[0]}
    if not per_run:
        return None
    fig, ax = figure()
    for rel, (t, rate) in sorted(per_run.items()):
        ax.step(t, rate, where="post", label=plain(rel))
    ax.set_xlabel("time since the first completion (s)")
    ax.set_ylabel("completed samples/s")
    ax.set_title(plain(f"{group}: throughput over time (model-level trace)".lstrip(": ")))
    ax.grid(True, alpha=0.3)
    ax.legend(**LEGEND_OUTSIDE)
    return svg(fig)
