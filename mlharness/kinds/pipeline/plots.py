"""The report's section for pipeline runs (a run folder with ``pipeline_summary.json``): each stage's calls, errors,
call latency p50/p90/p99, busy share and throughput, and a timeline of a few samples' stage visits.

LoadGen times a sample from issue to completion; where the time went is in the pipeline SUT's own records
(kinds/pipeline/report.py). The busy share is a stage's summed call time over its workers' time in the test
(``busy_s / (workers x wall_s)``): the stage near 100% is the one that bounds the pipeline. The timeline draws
the first samples issued, one row each: a thin bar while a sample waits for a stage's worker, a thick one while
the stage runs it, so overlapping stages of different samples show as overlapping bars.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from mlharness.fileguard import iter_jsonl
from mlharness.kinds.pipeline.report import RESULTS_FILE, SUMMARY_FILE
from mlharness.report.plots import LEGEND_OUTSIDE, figure, plain, svg
from mlharness.report.treefiles import present, read_optional_json

TIMELINE_SAMPLES = 12  # rows of the timeline: the first samples issued
COLUMNS = ("run", "stage", "framework", "workers", "calls", "errors", "p50 / p90 / p99 ms", "busy share",
           "throughput (/s)", "load (s)")


def load(path: Path) -> dict[str, Any] | None:
    """The pipeline summary of a run folder, None where it has none (or an unreadable one)."""
    summary = read_optional_json(path / SUMMARY_FILE, "pipeline summary")
    return summary if isinstance(summary, dict) and isinstance(summary.get("stages"), list) else None


def first_records(path: Path, n: int = TIMELINE_SAMPLES) -> list[dict[str, Any]]:
    """The ``n`` first-issued samples' records (by their first stage's queued time); [] without readable ones."""
    records = []
    if not present(path / RESULTS_FILE, "pipeline results"):
        return []
    try:
        for _, r in iter_jsonl(path / RESULTS_FILE, "pipeline results", error=ValueError, allow_nan=True):
            if isinstance(r, dict) and r.get("stages"):
                records.append(r)
    except ValueError:
        return []
    return sorted(records, key=lambda r: r["stages"][0].get("queued_s") or 0.0)[:n]


def busy_share(stage: dict[str, Any], wall_s: float | None) -> float | None:
    if not wall_s or not stage.get("workers"):
        return None
    return stage["busy_s"] / (stage["workers"] * wall_s)


def stage_rows(rel: str, s: dict[str, Any]) -> list[list[str]]:
    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:,.3g}"

    rows = []
    for st in s["stages"]:
        lat, share = st.get("latency_ms") or {}, busy_share(st, s.get("wall_s"))
        rows.append([rel, st["stage"], st.get("framework", ""), str(st.get("workers", "")), str(st.get("count", 0)),
                     str(st.get("errors", 0)), " / ".join(ms(lat.get(k)) for k in ("p50", "p90", "p99")),
                     "n/a" if share is None else f"{share:.0%}",
                     "n/a" if not st.get("throughput") else f"{st['throughput']:,.4g}",
                     "n/a" if st.get("load_s") is None else f"{st['load_s']:.3g}"])
    if s.get("throughput"):
        bound = s.get("slowest_stage_bound_per_s")
        rows.append([rel, "(pipeline)", "", "", str(s.get("samples", 0)), str(s.get("failed", 0)), "", "",
                     f"{s['throughput']:,.4g}" + (f" (slowest stage alone: {bound:,.4g})" if bound else ""), ""])
    return rows


def timeline(rel: str, stages: list[str], records: list[dict[str, Any]]) -> str | None:
    """A Gantt-like view: one row per sample, its stage visits as bars (thin: queued, thick: in the stage)."""
    if not records:
        return None
    import matplotlib

    colours = matplotlib.colormaps["tab10"]
    fig, ax = figure(7.0, 0.5 + 0.28 * len(records))
    t0 = min(v["queued_s"] for r in records for v in r["stages"])
    labelled: set[str] = set()
    for row, r in enumerate(records):
        for v in r["stages"]:
            k = stages.index(v["stage"]) if v["stage"] in stages else len(stages)
            colour = colours(k % 10)
            start = v.get("enter_s") or v.get("leave_s")
            if start is not None and start > v["queued_s"]:
                ax.barh(row, (start - v["queued_s"]) * 1e3, left=(v["queued_s"] - t0) * 1e3, height=0.2,
                        color=colour, alpha=0.4)
            if v.get("enter_s") is not None and v.get("leave_s") is not None:
                label = None if v["stage"] in labelled else v["stage"]
                labelled.add(v["stage"])
                ax.barh(row, (v["leave_s"] - v["enter_s"]) * 1e3, left=(v["enter_s"] - t0) * 1e3, height=0.7,
                        color=colour, label=label)
    ax.set_yticks(range(len(records)), [f"#{r['qsl_idx']}" + (" (failed)" if r.get("error") else "")
                                        for r in records], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("ms from the first sample's issue")
    ax.set_title(plain(f"{rel}: stage visits of the first {len(records)} samples"))
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(**LEGEND_OUTSIDE)
    return svg(fig)


def section(runs: list[Any], figure_html: Any, table_html: Any) -> list[str]:
    """The HTML of the pipeline runs among ``runs`` (their ``path`` and ``rel``): the table, then a timeline each."""
    found = [(r.rel, Path(r.path), s) for r in runs if (s := load(Path(r.path))) is not None]
    if not found:
        return []
    rows = [row for rel, _, s in found for row in stage_rows(rel, s)]
    figures = [figure_html(timeline(rel, [st["stage"] for st in s["stages"]], first_records(path)),
                           f"{rel}: each row a sample (the first issued), a thick bar while a stage runs it, a thin "
                           "one while it waits for that stage's worker; bars of different rows that overlap are "
                           "stages of different samples running at once.")
               for rel, path, s in found]
    intro = ("One LoadGen sample goes through every stage of the pipeline: LoadGen times the sample, the stages' "
             "calls are the pipeline's records (pipeline_summary.json, pipeline_results.jsonl). Busy share: a "
             "stage's call time over its workers' time in the test; the stage near 100% bounds the pipeline.")
    return [f"<h2>Pipelines</h2><p>{escape(intro)}</p>", table_html(COLUMNS, rows),
            '<div class="figs">' + "".join(figures) + "</div>"]
