"""What a report says, shared by its Markdown, HTML and terminal forms: one row per run (values verbatim from
LoadGen's summary), the reasons behind INVALID and non-submittable runs, telemetry, traces, comparisons."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.report import accuracy, units
from mlharness.report.agents import agent_lines
from mlharness.report.collect import TOKEN_FIELDS, Run, attach_verdicts, find_runs, pair_runs
from mlharness.report.treefiles import (
    ANY,
    NUMBER,
    TRACE_LIMIT,
    Need,
    TreeFileError,
    check_shape,
    read_json,
    shown,
)
from mlharness.report.verdicts import Verdict, find_verdicts
from mlharness.telemetry.breakdown import Breakdown, layer_breakdown
from mlharness.telemetry.energy import energy_line

log = logging.getLogger(__name__)

COLUMNS = ("run", "benchmark", "test", "scenario", "mode", "batch", "metric", "value", "result", "compliance",
           "accuracy", "target", "p50 (ms)", "p90 (ms)", "p99 (ms)", "submittable")
TELEMETRY_KEYS = (("host_cpu_percent", "host CPU %"), ("process_cpu_percent", "process CPU % (100 = 1 core)"),
                  ("process_rss_mib", "process RSS (MiB)"))
GPU_KEYS = (("utilization_percent", "util %"), ("memory_used_mib", "mem MiB"), ("power_w", "power W"),
            ("sm_clock_mhz", "SM MHz"), ("temperature_c", "temp C"))
# what the report reads of a trace's spans (the stage totals, completions over time, the per-layer breakdown)
_SPAN = {"ts": Need(NUMBER), "dur": Need(NUMBER, missing_ok=True),
         "args": {"samples": Need(NUMBER, missing_ok=True), "shapes": [[ANY]]}}


@dataclass
class Report:
    root: Path
    runs: list[Run]
    skipped: list[Path]
    stages: dict[str, dict[str, float]] = field(default_factory=dict)  # run rel -> stage -> ms
    layers: dict[str, Breakdown] = field(default_factory=dict)  # run rel -> per-layer breakdown
    rates: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)  # run rel -> samples/s
    other: Report | None = None
    verdicts: list[Verdict] = field(default_factory=list)  # compliance verdicts of the tree
    sweep: Any = None  # a sweep.json at the root (report.sweep.Sweep)


def build(root: Path, compare: Path | None = None, only: list[Path] | None = None) -> Report:
    from mlharness.report.plots import stage_totals
    from mlharness.report.plots_time import completions_over_time
    from mlharness.report.sweep import find_sweep

    sweep = find_sweep(Path(root)) if only is None else None  # only: a query's runs (report --query)
    if sweep is not None and Path(root).is_file():
        root = Path(root).parent
    runs, skipped = find_runs(root, only)
    if not runs and sweep is None:
        raise MLHarnessError(f"no runs under {root}: a run is a folder holding mlperf_log_summary.txt (or a "
                             "sweep.json written by `mlharness sweep`)")
    verdicts = find_verdicts(Path(root))
    attach_verdicts(runs, verdicts)
    verdicts = verdicts if only is None else [v for v in verdicts if any(v in r.verdicts for r in runs)]
    report = Report(Path(root), runs, skipped, verdicts=verdicts, sweep=sweep)
    for r in runs:
        if r.trace is None:
            continue
        try:
            events = trace_events(r.trace)
        except TreeFileError as e:
            log.warning("%s", e)
            continue
        report.stages[r.rel] = stage_totals(events)
        report.rates[r.rel] = completions_over_time(events)
        try:
            report.layers[r.rel] = layer_breakdown(events)
        except MLHarnessError:
            pass  # a model-level trace: no operators
    if compare is not None:
        report.other = build(compare)
    return report


def trace_events(path: Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace (an object with ``traceEvents``, or a bare list), read bounded; a span
    (``ph: X``) whose time, duration, arguments or shapes are of another type is refused, naming it."""
    doc = read_json(path, "the trace", TRACE_LIMIT, shape=())
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TreeFileError(f"the trace {shown(path)} is not a Chrome trace: no 'traceEvents' list")
    for i, e in enumerate(events):
        if isinstance(e, dict) and e.get("ph") == "X":
            check_shape(e, _SPAN, path, "the trace", f"traceEvents[{i}]")
    return [e for e in events if isinstance(e, dict)]


def accuracy_cell(r: Run) -> str:
    """Each figure of the run's accuracy under its metric's own name, with the direction that is better."""
    found = accuracy.figures(r.accuracy_text, (r.meta or {}).get("accuracy"))
    if found:
        return accuracy.cell(found)
    return r.accuracy_text.splitlines()[0] if r.accuracy_text else ""


def p99_cell(r: Run) -> str:
    """The p99 latency against the bound LoadGen held the run to: a Server run's target latency, or a token
    model's TTFT and TPOT limits. An Offline run has no bound (its latencies are times into one query), a
    SingleStream or MultiStream run none either (its percentile is the result)."""
    if r.mode != "performance" or r.scenario == "Offline":
        return ""
    if r.token_quantiles("TTFT"):
        parts = []
        for kind in ("TTFT", "TPOT"):
            p99 = r.fields.get(TOKEN_FIELDS[kind][1].format("99.00"))
            if p99 is not None:
                parts.append(f"{kind} " + _against(p99, r.token_limit_ns(kind)))
        return "; ".join(parts)
    p99 = r.latencies.get("99.00")
    if p99 is None:
        return ""
    try:
        bound = float(r.fields.get("target_latency (ns)", "0"))
    except ValueError:
        bound = 0.0
    return _against(p99, bound if r.scenario == "Server" and bound > 0 else None)


def _against(ns: str, bound: float | None) -> str:
    if bound is None:
        return f"{units.ms_from_ns(ns)} ms"
    try:
        over = float(ns) > bound
    except ValueError:
        return f"{units.ms_from_ns(ns)} ms"
    return f"{units.ms_from_ns(ns)} ms {'>' if over else '≤'} {units.ms_from_ns(bound)} ms" + \
        (" (over the bound)" if over else "")


def target_cell(r: Run) -> str:
    status = r.accuracy_status()
    if not status:
        return "no MLPerf target" if r.accuracy_value is not None else ""
    return "; ".join(f"{label}: {'met' if ok else 'MISSED'}" for label, ok in status)


def compliance_cell(r: Run) -> str:
    """Each verdict of a compliance run, with the first deciding number of a failure (the compliance table
    has them all)."""
    return "; ".join(f"{v.test} {v.check} {v.label}" + (f" ({v.numbers[0].split('; ')[0]})"
                                                        if v.passed is not True and v.numbers else "")
                     for v in r.verdicts)


def result_cell(r: Run) -> str:
    """The verdict under the round's rules (said where it waives LoadGen's), and a compliance run's (a VALID run
    can fail its test)."""
    failed = [f"{v.test} {v.check} {v.label}" for v in r.verdicts if v.passed is not True]
    result = f"{r.result} (early stopping waived)" if r.waived else r.result
    return f"{result} run, " + ", ".join(failed) if result and failed else result or ""


def value_cell(r: Run) -> str:
    return units.metric(r.metric_text, r.metric_unit)


def row(r: Run) -> list[str]:
    lat = r.latencies
    sub = "" if r.meta is None else ("yes" if not r.not_submittable else f"no ({len(r.not_submittable)})")
    metric = (r.metric_name or "").replace(" (ns)", "")  # the value is shown in ms
    return [r.rel, r.benchmark, r.test or "", r.scenario or "", r.mode, str(r.batch or ""), metric,
            value_cell(r), result_cell(r), compliance_cell(r), accuracy_cell(r), target_cell(r),
            units.ms_from_ns(lat.get("50.00")), units.ms_from_ns(lat.get("90.00")),
            units.ms_from_ns(lat.get("99.00")), sub]


def cell(r: Run, column: str) -> str:
    return row(r)[COLUMNS.index(column)]


def notes(r: Run) -> list[str]:
    """Why a run is INVALID, failed its compliance test or is not submittable, in LoadGen's and mlharness's
    words."""
    out = [f"waived: {r.waived}"] if r.waived else []
    if r.result == "INVALID":
        out.append("INVALID: " + (", ".join(f"{f}: {v}" for f, v in r.satisfied if v.lower() != "yes")
                                  or "see the summary"))
    out += [f"compliance: {v.summary()}" for v in r.verdicts if v.passed is not True]
    out += [f"LoadGen recommends: {x}" for x in r.recommendations]
    if r.result == "INVALID":
        out += [f"early stopping: {_ns_in_words(x)}" for x in r.early_stopping]
    out += [f"not submittable: {x}" for x in r.not_submittable]
    return out


_SETTINGS = ("not submittable: ", "LoadGen recommends: ")


def shared_notes(runs: list[Run]) -> tuple[list[tuple[str, list[str]]], dict[str, list[str]]]:
    """Notes on a run's settings (not submittable, LoadGen's recommendations) said once for the page: (heading,
    notes) for each set of two or more runs that carry the same ones (every run, every performance run, or the
    runs named), and each run's notes less those. What a run's outcome was (INVALID and why, a compliance
    verdict) stays with the run, even where another run has the same words."""
    per_run = {r.rel: notes(r) for r in runs}
    holders: dict[str, list[str]] = {}
    for r in runs:
        for x in per_run[r.rel]:
            if x.startswith(_SETTINGS):
                holders.setdefault(x, []).append(r.rel)
    groups: dict[tuple[str, ...], list[str]] = {}
    for x, rels in holders.items():
        if len(rels) > 1 or len(runs) == 1:
            groups.setdefault(tuple(rels), []).append(x)
    said = {x for xs in groups.values() for x in xs}
    return ([(_who(runs, rels), xs) for rels, xs in sorted(groups.items(), key=lambda g: -len(g[0]))],
            {rel: [x for x in n if x not in said] for rel, n in per_run.items()})


def _who(runs: list[Run], rels: tuple[str, ...]) -> str:
    if len(rels) == len(runs):
        return "Every run"
    for mode in ("performance", "accuracy"):
        if set(rels) == {r.rel for r in runs if r.mode == mode}:
            return f"Every {mode} run"
    return f"{len(rels)} runs ({', '.join(rels)})"


def _ns_in_words(text: str) -> str:
    """LoadGen's early-stopping estimates are latencies in ns: shown in ms like every latency of the report."""
    return re.sub(r"(percentile estimate): (\d+)\b", lambda m: f"{m.group(1)}: {units.ms_from_ns(m.group(2))} ms",
                  text)


def _system_lines(root: Path) -> list[str]:
    """The system descriptions of a submission tree (``systems/<system>.json``), one line each."""
    out = []
    for path in sorted(root.rglob("systems/*.json")) if root.is_dir() else []:
        d = read_json(path, "the system description")
        if "system_name" not in d:
            continue
        acc = d.get("accelerator_model_name")
        gpus = f"{d.get('accelerators_per_node', '?')}x {acc}" if acc and acc != "N/A" else "no accelerator"
        out.append(f"system {d['system_name']}: {d.get('host_processors_per_node', '?')}x "
                   f"{d.get('host_processor_model_name', '?')} ({d.get('host_processor_core_count', '?')} cores), "
                   f"{d.get('host_memory_capacity', '?')} memory, {gpus}, {d.get('operating_system', '?')}; "
                   f"{d.get('framework', '?')}")
    return out


def host_lines(report: Report) -> list[str]:
    """The hosts and GPUs the runs saw, once for the page (each distinct value with the runs it covers)."""
    seen: dict[str, list[str]] = {}
    for r in report.runs:
        h = (r.meta or {}).get("host") or {}
        if h:
            text = (f"host {h.get('hostname', '?')}: {h.get('cpu_model', '?')}, {h.get('cpu_count', '?')} CPUs, "
                    f"{units.gib_from_bytes(h.get('memory_bytes'))} memory, {h.get('os', '?')}, "
                    f"Python {h.get('python', '?')}")
            seen.setdefault(text, []).append(r.rel)
        for text in agent_lines(r.meta):  # a remote run's model ran on its agents' hosts
            seen.setdefault(text, []).append(r.rel)
        t = r.telemetry
        if t is not None:
            gpus = t.get("gpus") or []
            text = ("GPUs: " + ", ".join(f"gpu{g.get('index')} {g.get('name') or ''}".strip() for g in gpus)
                    if gpus else f"GPUs: none ({t.get('nvml', 'NVML status unknown')})")
            seen.setdefault(text, []).append(r.rel)
    n = len(report.runs)
    return _system_lines(report.root) + [text if len(rels) == n else f"{text} ({len(rels)} of {n} runs: {', '.join(rels[:3])}"
            f"{', ...' if len(rels) > 3 else ''})" for text, rels in seen.items()]


def telemetry_lines(r: Run) -> list[str]:
    t = r.telemetry
    if t is None:
        return []
    lines = [f"{t.get('samples', 0)} samples every {t.get('interval_ms', 0):g} ms over "
             f"{units.number(t.get('duration_s', 0))} s"]
    host = t.get("host") or {}
    lines += [f"{label}: min {host[k]['min']:,.1f}, mean {host[k]['mean']:,.1f}, max {host[k]['max']:,.1f}"
              for k, label in TELEMETRY_KEYS if k in host]
    for g in t.get("gpus") or []:
        parts = [f"{label} {g[k]['mean']:,.1f} (max {g[k]['max']:,.1f})" for k, label in GPU_KEYS if k in g]
        lines.append(f"gpu{g.get('index')} {g.get('name') or ''}: " + ", ".join(parts))
    return lines + [x for x in (energy_line(t.get("energy")),) if x]  # joules and watts, or why not measured


VERDICT_COLUMNS = ("benchmark", "scenario", "test", "check", "verdict", "numbers", "folder")


def verdict_rows(report: Report) -> list[list[str]]:
    return [[v.benchmark, v.scenario, v.test, v.check, v.label, "; ".join(
        ([v.verdict_line] if v.passed is False and v.verdict_line != "TEST FAIL" else []) + v.numbers), v.rel]
        for v in report.verdicts]


TOKEN_COLUMNS = ("run", "scenario", "tokens/s", "TTFT p50 (ms)", "TTFT p90 (ms)", "TTFT p99 (ms)",
                 "TTFT limit (ms)", "TPOT p50 (ms)", "TPOT p90 (ms)", "TPOT p99 (ms)", "TPOT limit (ms)")


def token_rows(report: Report) -> list[list[str]]:
    out = []
    for r in report.runs:
        if r.mode != "performance" or not r.token_quantiles("TTFT"):
            continue
        cells = [r.rel, r.scenario or "", value_cell(r) if r.metric_unit == "tokens/s" else ""]
        for kind in ("TTFT", "TPOT"):
            pattern = TOKEN_FIELDS[kind][1]
            cells += [units.ms_from_ns(r.fields.get(pattern.format(p))) for p in ("50.00", "90.00", "99.00")]
            limit = r.token_limit_ns(kind)
            cells.append(units.ms_from_ns(limit) if limit else "")
        out.append(cells)
    return out


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
                     value_cell(a) or accuracy_cell(a), value_cell(b) or accuracy_cell(b),
                     ratio(a.metric_value, b.metric_value) or acc, units.ms_from_ns(pa), units.ms_from_ns(pb),
                     ratio(float(pa) if pa else None, float(pb) if pb else None)])
    return rows, only_a, only_b


COMPARE_COLUMNS = ("run", "other run", "metric", "value", "other value", "other / this", "p99 (ms)",
                   "other p99 (ms)", "p99 other / this")


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(columns: tuple[str, ...] | list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


def markdown(report: Report, top_layers: int = 10) -> str:
    from mlharness.report import sweep
    from mlharness.report.campaign import side_by_side
    from mlharness.telemetry.breakdown import markdown as layers_md

    out = [f"# mlharness report: {report.root}", "",
           f"{len(report.runs)} run{'' if len(report.runs) == 1 else 's'}. Values are LoadGen's summaries; "
           "latencies in milliseconds.", ""]
    out += [f"- {_md_cell(x)}" for x in host_lines(report)] + [""]
    if report.sweep is not None:
        out += ["## Sweep", ""] + [f"- {x}" for x in sweep.facts(report.sweep)] + [""]
        out += md_table(sweep.COLUMNS, sweep.rows(report.sweep)) + [""]
    common, own = shared_notes(report.runs)
    for who, xs in common:
        out += [f"{_md_cell(who)}:", ""] + [f"- {_md_cell(x)}" for x in xs] + [""]
    if report.runs:
        out += md_table(COLUMNS, [row(r) for r in report.runs])
    systems = side_by_side(report.root, report.runs)
    if systems and systems[1]:
        out += ["", "## Systems side by side", ""] + md_table(*systems)
    tokens = token_rows(report)
    if tokens:
        out += ["", "## Token latencies", ""] + md_table(TOKEN_COLUMNS, tokens)
    if report.verdicts:
        out += ["", "## Compliance", ""] + md_table(VERDICT_COLUMNS, verdict_rows(report))
    if report.skipped:
        out += ["", f"Left out: {len(report.skipped)} failed or partial run folders."]
    for r in report.runs:
        details = own[r.rel] + [f"telemetry: {x}" for x in telemetry_lines(r)]
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
