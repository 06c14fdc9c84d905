"""The report's figures, drawn with matplotlib's object API (no pyplot state, no GUI backend) and returned as
inline SVG text: the page needs no external file and no JavaScript. Text stays text (``svg.fonttype`` none),
so the figures are small and carry no glyph definitions whose ids could clash between figures on one page."""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

from mlharness.report.collect import PERCENTILES, Run

STAGES = ("queue_wait", "gather", "predict", "postprocess", "complete")
# legends beside the axes (run paths are long and would hide the lines); bbox_inches="tight" keeps them in
LEGEND_OUTSIDE = {"fontsize": "x-small", "loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}


def svg(fig: Any) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": None}):
        # no metadata block: no date (reports of the same runs are identical), no RDF namespaces
        fig.savefig(buf, format="svg", bbox_inches="tight",
                    metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG is inlined in HTML


def log_axis(ax: Any) -> None:
    """A log-scale y axis labelled in plain numbers (``40``, ``1,000``), not powers of ten; intermediate ticks
    are labelled only when the data span less than a decade (call it after plotting)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    numbers = FuncFormatter(lambda v, _: f"{v:,.3g}")
    low, high = ax.get_ylim()
    ax.yaxis.set_major_formatter(numbers)
    ax.yaxis.set_minor_formatter(numbers if low > 0 and high / low < 10 else NullFormatter())


def plain(text: Any) -> str:
    """Text from a results tree (a folder name, a label of sweep.json) as matplotlib draws it literally: a pair
    of ``$`` would otherwise start mathtext, which fails on what it cannot parse."""
    return str(text).replace("$", r"\$")


def figure(width: float = 6.0, height: float = 3.4) -> tuple[Any, Any]:
    import matplotlib
    from matplotlib.figure import Figure

    # a matplotlibrc asking for TeX would hand every label, names from the tree included, to LaTeX
    matplotlib.rcParams["text.usetex"] = False
    fig = Figure(figsize=(width, height), dpi=100)
    return fig, fig.add_subplot(1, 1, 1)


def latency_percentiles(runs: list[Run]) -> str | None:
    """Latency per percentile, one line per performance run of one model and scenario. Offline runs are left
    out: an Offline latency is the time into the one query at which a sample completed, not a response time."""
    runs = [r for r in runs if r.mode == "performance" and r.latencies and r.scenario != "Offline"]
    if not runs:
        return None
    fig, ax = figure()
    xs = list(range(len(PERCENTILES)))
    for r in runs:
        lat = r.latencies
        ys = [float(lat[p]) / 1e6 if p in lat else float("nan") for p in PERCENTILES]
        ax.plot(xs, ys, marker="o", label=plain(r.rel))
    ax.set_xticks(xs, [f"p{float(p):g}" for p in PERCENTILES])
    ax.set_ylabel("latency (ms)")
    log_axis(ax)
    ax.set_title(plain(f"{group_title(runs)}: latency percentiles (LoadGen)"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(**LEGEND_OUTSIDE)
    return svg(fig)


def group_title(runs: list[Run]) -> str:
    """The model and scenario the runs of a figure share."""
    r = runs[0]
    return f"{r.benchmark} {r.scenario or ''}".strip()


def throughput_of_runs(runs: list[Run]) -> str | None:
    """The Offline result of each performance run of one model: one bar per run, in the unit LoadGen reports
    (samples/s, or tokens/s for a token model)."""
    runs = [r for r in runs if r.mode == "performance" and r.scenario == "Offline" and r.metric_value]
    runs = [r for r in runs if r.metric_unit == runs[0].metric_unit] if runs else []
    if not runs:
        return None
    fig, ax = figure(height=max(1.6, 0.4 * len(runs) + 1.1))
    labels = [plain(r.rel) for r in runs]
    values = [float(r.metric_value or 0) for r in runs]
    ax.barh(labels, values, color="#4c72b0")
    for y, v in enumerate(values):
        ax.annotate(f"{v:,.0f}" if v >= 1000 else f"{v:,.4g}", (v, y), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize="x-small")
    ax.set_xlabel(runs[0].metric_unit or "result")
    ax.set_title(plain(f"{group_title(runs)}: result of each run"))
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)
    return svg(fig)


def throughput_vs_batch(runs: list[Run]) -> str | None:
    """Samples/s against batch size, for the runs of one model and scenario when they differ in batch size."""
    points = sorted((r.batch, r.metric_value) for r in runs
                    if r.mode == "performance" and r.metric_unit == "samples/s" and r.batch and r.metric_value)
    if len({b for b, _ in points}) < 2:
        return None
    fig, ax = figure()
    ax.plot([b for b, _ in points], [v for _, v in points], marker="o", label=plain(group_title(runs)))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("max batch size")
    ax.set_ylabel("samples/s")
    ax.set_title(plain(f"{group_title(runs)}: throughput vs batch size"))
    ax.grid(True, alpha=0.3)
    return svg(fig)


def stage_totals(events: list[dict[str, Any]]) -> dict[str, float]:
    """Total milliseconds per model-level stage of a trace."""
    totals: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "model" and e.get("name") in STAGES:
            totals[e["name"]] += float(e.get("dur", 0)) / 1000.0
    return dict(totals)


def stage_breakdown(per_run: dict[str, dict[str, float]], group: str = "") -> str | None:
    """One stacked bar per traced run (of one model and scenario): where the time of the timed path went."""
    per_run = {k: v for k, v in per_run.items() if v}
    if not per_run:
        return None
    fig, ax = figure(height=max(1.8, 0.5 * len(per_run) + 1.2))
    names = list(per_run)
    left = [0.0] * len(names)
    for stage in STAGES:
        widths = [per_run[n].get(stage, 0.0) for n in names]
        if any(widths):
            ax.barh([plain(n) for n in names], widths, left=left, label=stage)
            left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel("total time (ms)")
    ax.set_title(plain(f"{group}: stage breakdown (model-level trace)".lstrip(": ")))
    ax.invert_yaxis()
    ax.legend(fontsize="x-small", ncols=len(STAGES), loc="upper center", bbox_to_anchor=(0.5, -0.3))
    return svg(fig)


def gpu_utilisation(runs: list[Run]) -> str | None:
    """GPU utilisation over time, from the telemetry series of each run of one model and scenario."""
    lines = []
    for r in runs:
        s = r.series or {}
        for g in s.get("gpus") or []:
            util = g.get("utilization_percent")
            if util and any(v is not None for v in util):
                lines.append((f"{r.rel} gpu{g.get('index', '?')}", s.get("t_s") or [], util))
    return _over_time(lines, "GPU utilisation (%)", f"{group_title(runs)}: GPU utilisation (NVML)" if runs else "",
                      ylim=(0, 105))


def cpu_utilisation(runs: list[Run]) -> str | None:
    """The harness process's CPU utilisation over time (100% = one core), from the telemetry series of each run
    of one model and scenario."""
    lines = []
    for r in runs:
        s = r.series or {}
        cpu = (s.get("host") or {}).get("process_cpu_percent")
        if cpu and len(cpu) > 1:
            lines.append((r.rel, s.get("t_s") or [], cpu))
    return _over_time(lines, "process CPU (%, 100 = one core)",
                      f"{group_title(runs)}: CPU utilisation of the harness process" if runs else "")


def _over_time(lines: list[tuple[str, list, list]], ylabel: str, title: str,
               ylim: tuple[float, float] | None = None) -> str | None:
    """One line per (label, times, values) series; missing samples (None) are left out."""
    if not lines:
        return None
    fig, ax = figure()
    for label, t, values in lines:
        pts = [(a, b) for a, b in zip(t, values, strict=False) if a is not None and b is not None]
        ax.plot([a for a, _ in pts], [b for _, b in pts], label=plain(label))
    ax.set_xlabel("time since the run started (s)")
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(plain(title))
    ax.grid(True, alpha=0.3)
    ax.legend(**LEGEND_OUTSIDE)
    return svg(fig)
