"""``mlharness compare A B``: two result trees (or two run folders) side by side.

The runs are found and read by the report package (:func:`mlharness.report.collect.find_runs`), so the numbers
are LoadGen's summaries. Runs of one side that differ only in a repeat marker (``r1``/``r2``, ``run_1``, a
sweep's ``-r2`` label suffix) form one group; a group of A is paired with the group of B of the same benchmark,
scenario, mode and compliance test (and, when several groups share that, the same folder layout). Each metric
they both report gets a delta, a ratio B / A and the better side; with repeats on both sides a verdict says
whether the difference exceeds the run-to-run spread: "beyond spread" when the ranges [min, max] of the two
sides do not overlap, "within spread" when they do (Welch's t-test p-value is added as information when scipy
is installed)."""

from __future__ import annotations

import math
import re
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.report.collect import SUMMARY, Run, find_runs

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline", "Interactive")
_REPEAT_PART = re.compile(r"^(?:r|run_?|rep(?:eat)?_?|repeat-)\d+$", re.IGNORECASE)
_REPEAT_SUFFIX = re.compile(r"[-_]r\d+$")
_TEST_PART = re.compile(r"^TEST\d+$")

# Summary lines compared besides the scenario's metric: (LoadGen's key, unit, higher is better)
EXTRA_LINES = (
    ("Tokens per second", "tokens/s", True),
    ("Completed tokens per second", "tokens/s", True),
    ("Mean latency (ns)", "ns", False),
    ("50.00 percentile latency (ns)", "ns", False),
    ("90.00 percentile latency (ns)", "ns", False),
    ("99.00 percentile latency (ns)", "ns", False),
    ("99.90 percentile latency (ns)", "ns", False),
    ("TPS w/ loadgen overhead", "tokens/s", True),
    ("TPS w/o loadgen overhead", "tokens/s", True),
    ("90.0th first token percentile latency (ns)", "ns", False),
    ("99.0th first token percentile latency (ns)", "ns", False),
    ("Mean First Token latency (ns)", "ns", False),
    ("50.00 percentile first token latency (ns)", "ns", False),
    ("90.00 percentile first token latency (ns)", "ns", False),
    ("99.00 percentile first token latency (ns)", "ns", False),
    ("Mean Time per Output Token (ns)", "ns", False),
    ("50.00 percentile time to output token (ns)", "ns", False),
    ("90.00 percentile time to output token (ns)", "ns", False),
    ("99.00 percentile time to output token (ns)", "ns", False),
)
NO_REPEATS = "no repeats: spread unknown"
ONE_SIDED = "repeats on one side only: spread unknown"
WITHIN = "within spread"
BEYOND = "beyond spread"
SPREAD_METHOD = "ranges [min, max] of the repeats overlap or not"


def config_rel(rel: str) -> str:
    """``rel`` without its repeat markers: the runs of one configuration share it."""
    parts = []
    for p in Path(rel).parts:
        if p == "." or _REPEAT_PART.match(p):
            continue
        parts.append(_REPEAT_SUFFIX.sub("", p))
    return "/".join(parts)


def benchmark_of(run: Run) -> str:
    """mlharness's metadata, else the folder before the scenario's (the submission layout)."""
    if run.meta and run.meta.get("benchmark"):
        return str(run.meta["benchmark"])
    parts = Path(run.rel).parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in SCENARIOS:
            return parts[i - 1]
    return "" if run.benchmark == "." else run.benchmark  # a bare LoadGen run folder names no benchmark


def test_of(run: Run) -> str:
    """The compliance test a run belongs to (TEST01 ...), or "" for the benchmark's own runs."""
    return next((p for p in Path(run.rel).parts if _TEST_PART.match(p)), "")


@dataclass
class Group:
    """The runs of one side that repeat one configuration."""

    benchmark: str
    scenario: str
    mode: str
    test: str
    config: str
    runs: list[Run] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.benchmark, self.scenario, self.mode, self.test)

    @property
    def label(self) -> str:
        return " ".join(x for x in (self.benchmark, self.scenario, self.mode, self.test) if x)

    @property
    def rels(self) -> list[str]:
        return [r.rel for r in self.runs]


def group_runs(runs: list[Run]) -> list[Group]:
    groups: dict[tuple[str, ...], Group] = {}
    for r in runs:
        g = Group(benchmark_of(r), r.scenario or "", r.mode, test_of(r), config_rel(r.rel))
        groups.setdefault((*g.key, g.config), g).runs.append(r)
    return list(groups.values())


def run_metrics(run: Run) -> dict[str, tuple[float, str, bool]]:
    """name -> (value, unit, higher is better) of one run: the scenario's metric, token throughput, latency
    percentiles, TTFT/TPOT, accuracy."""
    out: dict[str, tuple[float, str, bool]] = {}
    if run.metric_name and run.metric_value is not None:
        out[run.metric_name] = (run.metric_value, run.metric_unit, run.metric_unit != "ns")
    for key, unit, higher in EXTRA_LINES:
        try:
            out.setdefault(key, (float(run.fields[key]), unit, higher))
        except (KeyError, ValueError):
            continue
    if run.accuracy_value is not None:
        name = f"accuracy ({run.target.metric})" if run.target else "accuracy"
        out[name] = (run.accuracy_value, "", True)
    return out


@dataclass
class Side:
    values: list[float]

    @property
    def median(self) -> float:
        return float(statistics.median(self.values))

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def to_dict(self) -> dict[str, Any]:
        return {"values": self.values, "median": self.median, "min": self.low, "max": self.high,
                "n": len(self.values)}


@dataclass
class MetricDelta:
    name: str
    unit: str
    higher_is_better: bool
    a: Side
    b: Side
    p_value: float | None = None

    @property
    def delta(self) -> float:
        return self.b.median - self.a.median

    @property
    def ratio(self) -> float | None:
        """B / A of the medians (of the single values without repeats)."""
        return self.b.median / self.a.median if self.a.median else None

    @property
    def better(self) -> str:
        """"a", "b" or "same"."""
        if self.b.median == self.a.median:
            return "same"
        return "b" if (self.b.median > self.a.median) == self.higher_is_better else "a"

    @property
    def speedup(self) -> float | None:
        """How many times better B is than A (above 1: B better), whichever way the metric points."""
        r = self.ratio
        if r is None or r <= 0:
            return None
        return r if self.higher_is_better else 1 / r

    @property
    def verdict(self) -> str:
        na, nb = len(self.a.values), len(self.b.values)
        if na < 2 and nb < 2:
            return NO_REPEATS
        if na < 2 or nb < 2:
            return ONE_SIDED
        return WITHIN if self.a.low <= self.b.high and self.b.low <= self.a.high else BEYOND

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit,
                "direction": "higher is better" if self.higher_is_better else "lower is better",
                "a": self.a.to_dict(), "b": self.b.to_dict(), "delta": self.delta, "ratio": self.ratio,
                "better": self.better, "speedup": self.speedup, "verdict": self.verdict,
                "verdict_method": SPREAD_METHOD if self.verdict in (WITHIN, BEYOND) else None,
                "welch_p_value": self.p_value}


def _welch_p(a: list[float], b: list[float]) -> float | None:
    """Welch's two-sided t-test p-value, or None (scipy not installed, too few runs, no variance)."""
    if len(a) < 2 or len(b) < 2:
        return None
    try:
        from scipy import stats
    except ImportError:
        return None
    with warnings.catch_warnings():  # nearly equal values: scipy warns, and the p-value says as much
        warnings.simplefilter("ignore")
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return None if math.isnan(p) else p


def compare_groups(a: Group, b: Group) -> list[MetricDelta]:
    per_a = [run_metrics(r) for r in a.runs]
    per_b = [run_metrics(r) for r in b.runs]
    names: list[str] = []
    for m in per_a + per_b:
        names += [n for n in m if n not in names]
    out = []
    for name in names:
        va = [m[name][0] for m in per_a if name in m]
        vb = [m[name][0] for m in per_b if name in m]
        if not va or not vb:
            continue
        _, unit, higher = next(m[name] for m in per_a if name in m)
        out.append(MetricDelta(name, unit, higher, Side(va), Side(vb), _welch_p(va, vb)))
    return out


@dataclass
class Pair:
    a: Group
    b: Group
    metrics: list[MetricDelta]

    @property
    def primary(self) -> MetricDelta | None:
        """The scenario's LoadGen metric (None for accuracy runs)."""
        name = self.a.runs[0].metric_name
        return next((m for m in self.metrics if m.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        primary = self.primary
        return {"benchmark": self.a.benchmark, "scenario": self.a.scenario, "mode": self.a.mode,
                "test": self.a.test or None, "a_runs": self.a.rels, "b_runs": self.b.rels,
                "a_benchmark": self.a.benchmark, "b_benchmark": self.b.benchmark,
                "a_results": [r.result for r in self.a.runs], "b_results": [r.result for r in self.b.runs],
                "primary_metric": primary.name if primary else None,
                "metrics": [m.to_dict() for m in self.metrics]}


def pair_groups(ga: list[Group], gb: list[Group]) -> tuple[list[tuple[Group, Group]], list[Group], list[Group]]:
    """Same key and layout first, then a key found once on each side, then the one group left on each side
    when their scenario and mode agree (two single run folders of differently named models)."""
    rest_a, rest_b = list(ga), list(gb)
    pairs: list[tuple[Group, Group]] = []

    def take(match) -> None:
        for a in list(rest_a):
            found = [b for b in rest_b if match(a, b)]
            if len(found) == 1 and sum(1 for x in rest_a if match(x, found[0])) == 1:
                pairs.append((a, found[0]))
                rest_a.remove(a)
                rest_b.remove(found[0])

    take(lambda a, b: a.key == b.key and a.config == b.config)
    take(lambda a, b: a.key == b.key)
    if len(rest_a) == 1 and len(rest_b) == 1:
        take(lambda a, b: (a.scenario, a.mode, a.test) == (b.scenario, b.mode, b.test))
    return pairs, rest_a, rest_b


@dataclass
class Comparison:
    a: Path
    b: Path
    pairs: list[Pair]
    only_a: list[Group]
    only_b: list[Group]

    @property
    def speedups(self) -> list[tuple[Pair, MetricDelta, float]]:
        out = []
        for p in self.pairs:
            m = p.primary
            if m is not None and m.speedup is not None:
                out.append((p, m, m.speedup))
        return out

    @property
    def speedup(self) -> float | None:
        """Geometric mean over the paired performance runs of how many times faster B is than A."""
        s = [x for _, _, x in self.speedups]
        return math.exp(sum(math.log(x) for x in s) / len(s)) if s else None

    @property
    def faster(self) -> str | None:
        s = self.speedup
        return None if s is None or s == 1 else ("b" if s > 1 else "a")

    def headline(self) -> str:
        s, found = self.speedup, self.speedups
        if s is None:
            return (f"no performance runs paired between {self.a} and {self.b}: accuracy and other figures "
                    "only")
        if s == 1:
            return f"{self.a} (A) and {self.b} (B) are equally fast on the scenario metric"
        fast, slow = (("B", self.b), ("A", self.a)) if s > 1 else (("A", self.a), ("B", self.b))
        times = s if s > 1 else 1 / s
        if len(found) == 1:
            _, m, _ = found[0]
            how = f"on {m.name} (A {fmt(m.a.median)} vs B {fmt(m.b.median)} {m.unit}; {m.verdict})"
        else:
            beyond = sum(1 for _, m, _ in found if m.verdict == BEYOND)
            how = (f"geometric mean over {len(found)} paired performance runs of their scenario metric "
                   f"({beyond} beyond the run-to-run spread)")
        return (f"{fast[0]} ({fast[1]}) is faster than {slow[0]} ({slow[1]}): {times:.3f}x "
                f"(+{100 * (times - 1):.1f}%) {how}")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "mlharness-compare", "version": 1, "a": str(self.a), "b": str(self.b),
                "headline": self.headline(), "faster": self.faster, "speedup": self.speedup,
                "spread_method": SPREAD_METHOD, "pairs": [p.to_dict() for p in self.pairs],
                "only_a": [{"group": g.label, "runs": g.rels} for g in self.only_a],
                "only_b": [{"group": g.label, "runs": g.rels} for g in self.only_b]}


def fmt(v: float) -> str:
    """A value for people: integers (nanoseconds) with separators, others to two decimals or 4 digits."""
    if v == int(v):
        return f"{int(v):,}"
    return f"{v:,.2f}" if abs(v) >= 100 else f"{v:.4g}"


def _runs(path: Path, only: list[Path] | None = None) -> list[Run]:
    path = Path(path)
    if not path.exists():
        raise MLHarnessError(f"{path} does not exist: give a results directory, a submission tree or a run "
                             f"folder (one holding {SUMMARY})")
    if path.is_file() and path.name == SUMMARY:  # the summary itself stands for its run folder
        path = path.parent
    runs, skipped = find_runs(path, only)
    if not runs:
        extra = f" ({len(skipped)} failed or partial run folders left out)" if skipped else ""
        raise MLHarnessError(f"no runs in {path}{extra}: a run is a folder holding {SUMMARY}")
    return runs


def compare(a: Path, b: Path, only_a: list[Path] | None = None, only_b: list[Path] | None = None,
            label_a: str | None = None, label_b: str | None = None) -> Comparison:
    """``only_a`` / ``only_b``: a query's run folders under ``a`` / ``b`` (``compare --query``), shown as
    ``label_a`` / ``label_b``."""
    ga, gb = group_runs(_runs(a, only_a)), group_runs(_runs(b, only_b))
    a, b = Path(label_a or a), Path(label_b or b)
    pairs, only_a, only_b = pair_groups(ga, gb)
    if not pairs:
        def held(groups: list[Group]) -> str:
            return "; ".join(sorted({g.label for g in groups}))
        raise MLHarnessError(f"nothing pairs between {a} and {b}: runs pair by benchmark, scenario and mode; "
                             f"{a} holds {held(ga)}; {b} holds {held(gb)}")
    return Comparison(Path(a), Path(b), [Pair(x, y, compare_groups(x, y)) for x, y in pairs], only_a, only_b)
