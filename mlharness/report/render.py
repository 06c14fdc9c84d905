"""What a report says, shared by its Markdown, HTML and terminal forms: one row per run (values verbatim from
LoadGen's summary), the reasons behind INVALID and non-submittable runs, telemetry, traces, comparisons."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.report.collect import Run, find_runs, pair_runs
from mlharness.telemetry.breakdown import Breakdown, layer_breakdown, load_events

log = logging.getLogger(__name__)

COLUMNS = ("run", "benchmark", "scenario", "mode", "batch", "metric", "value", "result", "accuracy", "target",
           "p50 (ns)", "p90 (ns)", "p99 (ns)", "submittable")
TELEMETRY_KEYS = (("host_cpu_percent", "host CPU %"), ("process_cpu_percent", "process CPU % (100 = 1 core)"),
                  ("process_rss_mib", "process RSS MiB"))
GPU_KEYS = (("utilization_percent", "util %"), ("memory_used_mib", "mem MiB"), ("power_w", "power W"),
            ("sm_clock_mhz", "SM MHz"), ("temperature_c", "temp C"))


@dataclass
class Report:
    root: Path
    runs: list[Run]
    skipped: list[Path]
    stages: dict[str, dict[str, float]] = field(default_factory=dict)  # run rel -> stage -> ms
    layers: dict[str, Breakdown] = field(default_factory=dict)  # run rel -> per-layer breakdown
    other: Report | None = None


def build(root: Path, compare: Path | None = None) -> Report:
    from mlharness.report.plots import stage_totals

    runs, skipped = find_runs(root)
    if not runs:
        raise MLHarnessError(f"no runs under {root}: a run is a folder holding mlperf_log_summary.txt")
    report = Report(Path(root), runs, skipped)
    for r in runs:
        if r.trace is None:
            continue
        try:
            events = load_events(r.trace)
        except MLHarnessError as e:
            log.warning("%s", e)
            continue
        report.stages[r.rel] = stage_totals(events)
        try:
            report.layers[r.rel] = layer_breakdown(events)
        except MLHarnessError:
            pass  # a model-level trace: no operators
    if compare is not None:
        report.other = build(compare)
    return report


def accuracy_cell(r: Run) -> str:
    if r.accuracy_value is None:
        return r.accuracy_text.splitlines()[0] if r.accuracy_text else ""
    return f"{r.accuracy_value:.5g}"


def target_cell(r: Run) -> str:
    status = r.accuracy_status()
    if not status:
        return ""
    return "; ".join(f"{label} {'met' if ok else 'MISSED'}" for label, ok in status)


def row(r: Run) -> list[str]:
    lat = r.latencies
    sub = "" if r.meta is None else ("yes" if not r.not_submittable else f"no ({len(r.not_submittable)})")
    return [r.rel, r.benchmark, r.scenario or "", r.mode, str(r.batch or ""), r.metric_name or "",
            r.metric_text or "", r.result or "", accuracy_cell(r), target_cell(r), lat.get("50.00", ""),
            lat.get("90.00", ""), lat.get("99.00", ""), sub]


def notes(r: Run) -> list[str]:
    """Why a run is INVALID or not submittable, in LoadGen's and mlharness's words."""
    out = []
    if r.result == "INVALID":
        out.append("INVALID: " + (", ".join(f"{f}: {v}" for f, v in r.satisfied if v.lower() != "yes")
                                  or "see the summary"))
    out += [f"LoadGen recommends: {x}" for x in r.recommendations]
    if r.result == "INVALID":
        out += [f"early stopping: {x}" for x in r.early_stopping]
    out += [f"not submittable: {x}" for x in r.not_submittable]
    return out


def telemetry_lines(r: Run) -> list[str]:
    t = r.telemetry
    if t is None:
        return []
    lines = [f"{t.get('samples', 0)} samples every {t.get('interval_ms', 0):g} ms over "
             f"{t.get('duration_s', 0)} s"]
    host = t.get("host") or {}
    for key, label in TELEMETRY_KEYS:
        if key in host:
            s = host[key]
            lines.append(f"{label}: min {s['min']:g}, mean {s['mean']:g}, max {s['max']:g}")
    gpus = t.get("gpus") or []
    if not gpus:
        lines.append(f"GPUs: none ({t.get('nvml', 'NVML status unknown')})")
    for g in gpus:
        parts = [f"{label} {g[k]['mean']:g} (max {g[k]['max']:g})" for k, label in GPU_KEYS if k in g]
        lines.append(f"gpu{g.get('index')} {g.get('name') or ''}: " + ", ".join(parts))
    return lines


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return ""
    return f"{b / a:.3f}"


def compare_rows(report: Report) -> tuple[list[list[str]], list[Run], list[Run]]:
    """this run, other run, metric this / other / ratio, p99 this / other / ratio."""
    assert report.other is not None
    pairs, only_a, only_b = pair_runs(report.runs, report.other.runs)
    rows = []
    for a, b in pairs:
        pa, pb = a.latencies.get("99.00"), b.latencies.get("99.00")
        acc = ratio(a.accuracy_value, b.accuracy_value)
        rows.append([a.rel, b.rel, a.metric_name or ("accuracy" if acc else ""),
                     a.metric_text or accuracy_cell(a), b.metric_text or accuracy_cell(b),
                     ratio(a.metric_value, b.metric_value) or acc,
                     pa or "", pb or "", ratio(float(pa) if pa else None, float(pb) if pb else None)])
    return rows, only_a, only_b


COMPARE_COLUMNS = ("run", "other run", "metric", "value", "other value", "other / this", "p99 (ns)",
                   "other p99 (ns)", "p99 other / this")


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(columns: tuple[str, ...] | list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


def markdown(report: Report, top_layers: int = 10) -> str:
    from mlharness.telemetry.breakdown import markdown as layers_md

    out = [f"# mlharness report: {report.root}", "",
           f"{len(report.runs)} runs. Values are LoadGen's summaries verbatim (latencies in ns).", ""]
    out += md_table(COLUMNS, [row(r) for r in report.runs])
    if report.skipped:
        out += ["", f"Left out: {len(report.skipped)} failed or partial run folders."]
    for r in report.runs:
        details = notes(r) + [f"telemetry: {x}" for x in telemetry_lines(r)]
        stages = report.stages.get(r.rel)
        if stages:
            details.append("stages (total ms): " + ", ".join(f"{k} {v:.3f}" for k, v in stages.items()))
        if not details and r.rel not in report.layers:
            continue
        out += ["", f"## {r.rel}", ""] + [f"- {_md_cell(d)}" for d in details]
        if r.rel in report.layers:
            out += ["", layers_md(report.layers[r.rel], top_layers).replace("### ", "#### ")]
    if report.other is not None:
        rows, only_a, only_b = compare_rows(report)
        out += ["", f"## Compared with {report.other.root}", ""] + md_table(COMPARE_COLUMNS, rows)
        out += [f"- only in {report.root}: {r.rel}" for r in only_a]
        out += [f"- only in {report.other.root}: {r.rel}" for r in only_b]
    return "\n".join(out).rstrip() + "\n"
