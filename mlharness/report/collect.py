"""Find the runs under a results directory and read what each left behind: LoadGen's summary (kept as the
exact text of each value, so reports carry the same numbers), mlharness_run.json, accuracy.txt, the telemetry
series and the trace."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.fileguard import describe_kind
from mlharness.loadgen.logs import FIRST_TRY_DIR, METRIC_LINES, TOKEN_METRIC_LINES
from mlharness.report.treefiles import ANY, NUMBER, STRING, Each, present, read_json, read_text, shown
from mlharness.report.verdicts import Verdict, test_of
from mlharness.rounds import ROUNDS

SUMMARY = "mlperf_log_summary.txt"
PERCENTILES = ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90")
# token latencies of a generative run's summary: (min line, percentile line pattern, max line, limit line)
TOKEN_FIELDS = {
    "TTFT": ("Min First Token latency (ns)", "{} percentile first token latency (ns)",
             "Max First Token latency (ns)", "ttft_latency (ns)"),
    "TPOT": ("Min Time per Output Token (ns)", "{} percentile time to output token (ns)",
             "Max Time per Output Token (ns)", "tpot_latency (ns)"),
}

# MLPerf Inference reference accuracies and the fractions closed-division results must reach
REFERENCE = {
    "resnet50": ("top-1 %", 76.46, (0.99,)),
    "bert": ("F1", 90.874, (0.99, 0.999)),
    "3d-unet": ("mean DICE", 0.86170, (0.99, 0.999)),
}
_BENCH_PREFIX = (("resnet", "resnet50"), ("bert", "bert"), ("3d-unet", "3d-unet"))
_STATS = Each({"min": NUMBER, "mean": NUMBER, "max": NUMBER})
_GPU_STATS = {"mean": NUMBER, "max": NUMBER}
# what the report reads of mlharness_run.json: a field of another type is refused naming it
RUN_SHAPE = {
    "benchmark": STRING, "conf_model": STRING, "scenario": STRING, "mode": STRING, "accuracy": {}, "batching": {},
    "not_submittable_reasons": [ANY], "host": {},
    "agents": [{"address": STRING, "facts_error": STRING, "host": {}, "framework": {}, "system": {}}],
    "telemetry": {"samples": NUMBER, "interval_ms": NUMBER, "duration_s": NUMBER, "host": _STATS,
                  "gpus": [{k: _GPU_STATS for k in ("utilization_percent", "memory_used_mib", "power_w",
                                                     "sm_clock_mhz", "temperature_c")}],
                  "energy": {"available": ANY, "why": STRING, "joules": NUMBER, "seconds": NUMBER, "watts": NUMBER,
                             "idle_watts": NUMBER, "joules_per_sample": NUMBER}},
}
# the telemetry series (mlharness_telemetry.json) the figures draw
SERIES_SHAPE = {"t_s": [NUMBER], "gpus": [{"utilization_percent": [NUMBER]}], "host": Each([NUMBER])}
_ACCURACY_PATTERNS = (re.compile(r"accuracy=([0-9.]+)%"), re.compile(r'"f1":\s*([0-9.]+)'),
                      re.compile(r"mean = ([0-9.]+)"))


@dataclass
class Target:
    model: str
    metric: str
    reference: float
    fractions: tuple[float, ...]

    def thresholds(self) -> list[tuple[float, float]]:
        return [(f, self.reference * f) for f in self.fractions]


@dataclass
class Run:
    path: Path
    rel: str
    fields: dict[str, str]  # summary key -> value, verbatim
    scenario: str | None
    mode: str  # performance / accuracy / LoadGen's mode text for anything else
    result: str | None  # VALID / INVALID (performance runs)
    metric_name: str | None
    metric_text: str | None  # exactly as the summary prints it
    metric_unit: str
    satisfied: list[tuple[str, str]] = field(default_factory=list)
    recommendations: list[str] = field(default_factory=list)
    early_stopping: list[str] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    accuracy_text: str | None = None
    accuracy_value: float | None = None
    target: Target | None = None
    series: dict[str, Any] | None = None
    trace: Path | None = None
    verdicts: list[Verdict] = field(default_factory=list)  # of the compliance folder the run lies in
    # why ``result`` (the verdict under the round's rules) is VALID where LoadGen's line reads INVALID
    waived: str | None = None

    @property
    def test(self) -> str | None:
        """TESTnn when the run is a compliance run (it lies in a TESTnn folder)."""
        found = test_of(self.rel)
        return found[1] if found else None

    @property
    def accuracy_name(self) -> str | None:
        acc = (self.meta or {}).get("accuracy")
        if isinstance(acc, dict) and acc.get("name"):
            return str(acc["name"])
        return self.target.metric if self.target else None

    @property
    def metric_value(self) -> float | None:
        try:
            return float(self.metric_text) if self.metric_text else None
        except ValueError:
            return None

    @property
    def benchmark(self) -> str:
        if self.meta and self.meta.get("benchmark"):
            return str(self.meta["benchmark"])
        parts = Path(self.rel).parts
        found = test_of(self.rel)
        if found is not None:  # <benchmark>/<scenario>/TESTnn/...
            return parts[found[0] - 2] if found[0] >= 2 else self.rel
        return parts[-4] if self.mode == "performance" and len(parts) >= 4 else (parts[-3] if len(parts) >= 3
                                                                                   else self.rel)

    @property
    def batch(self) -> int | None:
        b = ((self.meta or {}).get("batching") or {}).get("max_batchsize")
        return int(b) if isinstance(b, int) else None

    @property
    def latencies(self) -> dict[str, str]:
        """percentile -> latency in ns, verbatim from the summary."""
        return {p: self.fields[f"{p} percentile latency (ns)"] for p in PERCENTILES
                if f"{p} percentile latency (ns)" in self.fields}

    @property
    def failures(self) -> list[str]:
        """Why LoadGen said INVALID: its 'satisfied' lines that are not Yes."""
        return [name for name, value in self.satisfied if value.lower() != "yes"]

    @property
    def not_submittable(self) -> list[str]:
        return list((self.meta or {}).get("not_submittable_reasons") or [])

    @property
    def telemetry(self) -> dict[str, Any] | None:
        t = (self.meta or {}).get("telemetry")
        return t if isinstance(t, dict) and t.get("enabled") else None

    def token_quantiles(self, kind: str) -> list[tuple[float, float]]:
        """(fraction of samples, latency in ns) of a generative run's TTFT or TPOT, from LoadGen's summary:
        its minimum, percentiles and maximum (the summary holds no per-sample values)."""
        low, pattern, high, _ = TOKEN_FIELDS[kind]
        points = [(0.0, self.fields.get(low))]
        points += [(float(p) / 100, self.fields.get(pattern.format(p))) for p in PERCENTILES]
        points.append((1.0, self.fields.get(high)))
        out = []
        for q, v in points:
            try:
                out.append((q, float(v)))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                continue
        return out if len(out) > 2 else []

    def token_limit_ns(self, kind: str) -> float | None:
        try:
            value = float(self.fields[TOKEN_FIELDS[kind][3]])
        except (KeyError, ValueError):
            return None
        return value if self.scenario == "Server" and value > 0 else None

    def accuracy_status(self) -> list[tuple[str, bool]]:
        """(label, reached) per target fraction."""
        if self.target is None or self.accuracy_value is None:
            return []
        return [(f"≥ {t:.5g}" + (f" ({100 * f:g}% of {self.target.reference:g})" if f != 1.0 else ""),
                 self.accuracy_value >= t) for f, t in self.target.thresholds()]


def parse_summary_text(text: str) -> dict[str, Any]:
    """Fields plus the structured parts: satisfied lines, recommendations, early stopping notes."""
    fields: dict[str, str] = {}
    satisfied: list[tuple[str, str]] = []
    sections: dict[str, list[str]] = {"Recommendations": [], "Early Stopping Result": []}
    current: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and stripped.rstrip(":").endswith("Early Stopping Result") and \
                stripped.rstrip(":") not in sections:  # a generative run's TTFT / TPOT results
            sections[stripped.rstrip(":")] = []
        if stripped.rstrip(":") in sections and stripped.endswith(":"):
            current = stripped.rstrip(":")
            continue
        if current is not None:
            if stripped.startswith("* "):
                sections[current].append(stripped[2:])
                continue
            if stripped and line.startswith(" ") and sections[current] and ":" not in stripped:
                sections[current][-1] += " " + stripped  # a wrapped note
                continue
            current = None
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or stripped.startswith("="):
            continue
        key = key.strip()
        if "satisfied" in key:
            satisfied.append((key, value.strip()))
        fields.setdefault(key, value.strip())
    return {"fields": fields, "satisfied": satisfied, "recommendations": sections["Recommendations"],
            "early_stopping": sections["Early Stopping Result"] + [
                f"{name.split()[0]}: {x}" for name, notes in sections.items()
                if name not in ("Recommendations", "Early Stopping Result") for x in notes]}


def _mode(fields: dict[str, str]) -> str:
    mode = fields.get("Mode", "")
    return {"PerformanceOnly": "performance", "AccuracyOnly": "accuracy"}.get(mode, mode or "unknown")


def target_for(meta: dict[str, Any] | None, rel: str) -> Target | None:
    # the benchmark name first: it says which target applies (bert-99.9), the model name does not
    names = [str((meta or {}).get(k) or "") for k in ("benchmark", "conf_model")] + list(Path(rel).parts)
    for name in names:
        for prefix, model in _BENCH_PREFIX:
            if name == model or name.startswith(prefix):
                metric, ref, fractions = REFERENCE[model]
                if name.endswith("-99.9"):
                    fractions = (0.999,)
                elif name.endswith("-99"):
                    fractions = (0.99,)
                return Target(model, metric, ref, fractions)
    return _checker_target(names)


def _checker_target(names: list[str]) -> Target | None:
    """The closed-division target the submission checker applies to a benchmark the table above lacks (the
    LLMs' primary figure, detection mAP): an absolute threshold."""
    from mlharness.submission.llm_rules import LLM_ACCURACY_TARGETS
    from mlharness.submission.rules import BENCHMARKS

    for name in names:
        if name in LLM_ACCURACY_TARGETS:
            metric, value = next(iter(LLM_ACCURACY_TARGETS[name].items()))
            return Target(name, metric, value, (1.0,))
        if name in BENCHMARKS:
            b = BENCHMARKS[name]
            return Target(name, b.accuracy_kind, b.accuracy_target, (1.0,))
    return None


def _json(path: Path, what: str, shape: Any) -> dict[str, Any] | None:
    return read_json(path, what, shape=shape) if present(path, what) else None


def _scenario_in_path(d: Path, root: Path) -> str | None:
    """The scenario folder of a results tree a run lies in (``<benchmark>/<scenario>/accuracy``)."""
    parts = d.relative_to(root).parts if d != root else ()
    return next((p for p in reversed(parts) if p in METRIC_LINES or p == "Interactive"), None)


def read_run(summary_path: Path, root: Path) -> Run:
    d = summary_path.parent
    parsed = parse_summary_text(read_text(summary_path, "LoadGen's summary"))
    fields = parsed["fields"]
    meta = _json(d / "mlharness_run.json", "the run's metadata", RUN_SHAPE)
    # an accuracy run's summary names no scenario: mlharness's metadata does
    scenario = fields.get("Scenario") or (meta or {}).get("scenario") or _scenario_in_path(d, root)
    metric_name, unit = METRIC_LINES.get(scenario or "", (None, ""))
    token_line = TOKEN_METRIC_LINES.get(scenario or "")
    if token_line and token_line[0] in fields:  # a generative run: LoadGen's metric is tokens per second
        metric_name, unit = token_line
    run = Run(
        path=d, rel=shown(d.relative_to(root)) if d != root else ".", fields=fields, scenario=scenario,
        mode=_mode(fields) if fields.get("Mode") else str((meta or {}).get("mode") or "unknown"),
        result=fields.get("Result is"), metric_name=metric_name,
        metric_text=fields.get(metric_name) if metric_name else None, metric_unit=unit,
        satisfied=parsed["satisfied"], recommendations=parsed["recommendations"],
        early_stopping=parsed["early_stopping"], meta=meta,
    )
    has_accuracy = present(d / "accuracy.txt", "the accuracy result")
    if run.mode == "unknown" and has_accuracy:
        run.mode = "accuracy"
    if run.mode == "accuracy":  # LoadGen reports no metric in accuracy mode
        run.metric_name = run.metric_text = None
    if has_accuracy:
        run.accuracy_text = read_text(d / "accuracy.txt", "the accuracy result").strip()
    acc = (meta or {}).get("accuracy")
    if isinstance(acc, dict) and isinstance(acc.get("value"), int | float):
        run.accuracy_value = float(acc["value"])
    elif run.accuracy_text:
        for pattern in _ACCURACY_PATTERNS:
            m = pattern.search(run.accuracy_text)
            if m:
                run.accuracy_value = float(m.group(1))
                break
    run.target = target_for(meta, run.rel)
    round_verdict(run)
    run.series = _json(d / "mlharness_telemetry.json", "the telemetry series", SERIES_SHAPE)
    trace = d / "mlharness_trace.json"
    run.trace = trace if present(trace, "the run's trace") else None
    return run


def round_verdict(run: Run) -> None:
    """Take the verdict under the round's rules over LoadGen's line, as the run's metadata records it
    (``result.valid``, ``result.loadgen_valid`` and ``result.waived``: :mod:`mlharness.run.metadata`). A run recorded
    before that is judged the same way here: INVALID for early stopping alone, of a benchmark whose early stopping
    its round waives. Call again once ``meta`` is known (a submission tree's record)."""
    from mlharness.calibration.explain import Explanation, waive

    meta = run.meta or {}
    result = meta.get("result") if isinstance(meta.get("result"), dict) else {}
    if run.mode != "performance" or run.result != "INVALID" or run.waived:
        return
    if "loadgen_valid" in result:
        if result.get("valid") is True and isinstance(result.get("waived"), str):
            run.result, run.waived = "VALID", result["waived"][:500]
        return
    failed = [k for k, v in run.satisfied if v.strip().lower() != "yes"]
    round_name = meta.get("round")
    if failed == ["Early stopping satisfied"] and isinstance(meta.get("conf_model"), str) and \
            isinstance(round_name, str) and round_name in ROUNDS:
        exp = waive(Explanation(False, ["early stopping"]), round_name, meta["conf_model"])
        if exp.valid:
            run.result, run.waived = "VALID", exp.waived


def first_play(folder: Path) -> bool:
    """Whether ``folder`` holds the first play of a run its parent folder holds (a second try's first_try/)."""
    return folder.name == FIRST_TRY_DIR and (folder.parent / SUMMARY).is_file()


def find_runs(root: Path, only: list[Path] | None = None) -> tuple[list[Run], list[Path]]:
    """Every run under ``root`` (or ``root`` itself), sorted by path; second: failed or partial run folders,
    left out of the report. ``only``: the run folders to read (a query's, from the evaluation database), the
    others under ``root`` left out."""
    root = Path(root)
    try:
        mode = os.stat(root).st_mode
    except FileNotFoundError:
        raise MLHarnessError(f"{shown(root)} does not exist") from None
    except OSError as e:
        raise MLHarnessError(f"{shown(root)} cannot be read: {e.strerror or e}") from None
    if not stat.S_ISDIR(mode):
        raise MLHarnessError(f"{shown(root)} is {describe_kind(mode) if not stat.S_ISREG(mode) else 'a file'}, "
                             "not a directory")
    runs: list[Run] = []
    skipped: list[Path] = []
    chosen = None if only is None else {Path(p).resolve() for p in only}
    for summary in sorted(root.rglob(SUMMARY)):  # whatever carries the name: read_run names what it is
        if chosen is not None and summary.parent.resolve() not in chosen:
            continue
        rel_parts = summary.parent.relative_to(root).parts
        if any(p.startswith(".") or ".failed-" in p for p in rel_parts):
            skipped.append(summary.parent)
            continue
        if first_play(summary.parent):
            continue  # the first play of a run played twice: the run is its folder's summary
        runs.append(read_run(summary, root))
    return runs, skipped


def attach_verdicts(runs: list[Run], verdicts: list[Verdict]) -> None:
    """Give each compliance run the verdicts of the TESTnn folder it lies in."""
    for r in runs:
        for v in verdicts:
            if r.path == v.path.parent or v.path.parent in r.path.parents:
                r.verdicts.append(v)


def pair_runs(a: list[Run], b: list[Run]) -> tuple[list[tuple[Run, Run]], list[Run], list[Run]]:
    """Match the runs of two result directories: by relative path, else by benchmark, scenario, mode and
    batch size."""
    by_rel = {r.rel: r for r in b}
    pairs: list[tuple[Run, Run]] = []
    used: set[str] = set()
    rest: list[Run] = []
    for r in a:
        if r.rel in by_rel:
            pairs.append((r, by_rel[r.rel]))
            used.add(r.rel)
        else:
            rest.append(r)
    key = lambda r: (r.benchmark, r.scenario, r.mode, r.batch)  # noqa: E731
    remaining = {key(r): r for r in b if r.rel not in used}
    only_a = []
    for r in rest:
        other = remaining.pop(key(r), None)
        if other is None:
            only_a.append(r)
        else:
            pairs.append((r, other))
    return pairs, only_a, list(remaining.values())
