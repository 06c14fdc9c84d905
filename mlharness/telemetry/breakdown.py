"""Per-layer breakdown of a framework-level trace (``--trace framework`` or above).

Operator events (``cat == "framework.op"``, see :mod:`mlharness.telemetry.framework_profile`) are grouped by
operator type and by layer (type plus input shapes: the convolutions of one ResNet stage share a row), with
their total time, count and share. Only operators that ran inside the model-level ``predict`` spans count, so
warm-up runs before LoadGen started are left out; the operators' total is then compared with the predict
time the SUT measured: the rest is framework overhead (session entry, input/output copies, scheduling, ...).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.fileguard import DATA_FILE_LIMIT, read_json

OP_CAT = "framework.op"
EPS_US = 1.0  # timestamps of two clocks meet here: allow a microsecond at the span edges


@dataclass
class Row:
    key: str
    count: int
    total_us: float
    share: float  # of all operator time
    mean_us: float


@dataclass
class Breakdown:
    frameworks: list[str]
    op_events: int  # operator events inside predict spans (all of them when the trace has no predict span)
    outside: int  # operator events outside every predict span (warm-up, ...), not counted
    op_total_us: float
    predict_spans: int
    predict_total_us: float | None
    by_type: list[Row] = field(default_factory=list)
    by_layer: list[Row] = field(default_factory=list)

    @property
    def overhead_us(self) -> float | None:
        return None if self.predict_total_us is None else self.predict_total_us - self.op_total_us

    @property
    def overhead_share(self) -> float | None:
        if not self.predict_total_us:
            return None
        return 1.0 - self.op_total_us / self.predict_total_us

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["overhead_us"], d["overhead_share"] = self.overhead_us, self.overhead_share
        return d


def load_events(path: Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace file (object with ``traceEvents``, or a bare list)."""
    # a framework trace holds an event per operator call: hundreds of MiB for a long run
    doc = read_json(Path(path), "trace", DATA_FILE_LIMIT, error=MLHarnessError, allow_nan=True)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise MLHarnessError(f"{path} is not a Chrome trace (no traceEvents list)")
    return events


def _shape_text(shapes: Any) -> str:
    if not shapes:
        return ""
    return ", ".join("x".join(str(d) for d in s) if s else "scalar" for s in shapes)


def _union(intervals: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Merged intervals as (starts, ends): predict spans of several workers overlap."""
    starts: list[float] = []
    ends: list[float] = []
    for a, b in sorted(intervals):
        if ends and a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return starts, ends


def _inside(starts: list[float], ends: list[float], a: float, b: float) -> bool:
    i = bisect.bisect_right(starts, a + EPS_US) - 1
    return i >= 0 and starts[i] - EPS_US <= a and b <= ends[i] + EPS_US


def _rows(groups: dict[str, list[float]], total: float) -> list[Row]:
    rows = [Row(k, len(v), sum(v), (sum(v) / total) if total else 0.0, sum(v) / len(v))
            for k, v in groups.items()]
    rows.sort(key=lambda r: (-r.total_us, r.key))
    return rows


def layer_breakdown(events: list[dict[str, Any]]) -> Breakdown:
    ops = [e for e in events if e.get("cat") == OP_CAT and e.get("ph") == "X"]
    if not ops:
        raise MLHarnessError("the trace has no framework operator events: record it with --trace framework "
                             "(or system/full) on a framework with a profiler (onnxruntime, pytorch, "
                             "tensorflow)")
    predicts = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                if e.get("ph") == "X" and e.get("cat") == "model" and e.get("name") == "predict"]
    outside = 0
    if predicts:
        starts, ends = _union(predicts)
        kept = []
        for e in ops:
            a = float(e["ts"])
            if _inside(starts, ends, a, a + float(e.get("dur", 0))):
                kept.append(e)
            else:
                outside += 1
        ops = kept
    by_type: dict[str, list[float]] = defaultdict(list)
    by_layer: dict[str, list[float]] = defaultdict(list)
    frameworks = set()
    for e in ops:
        args = e.get("args") or {}
        op = str(args.get("op_type") or e.get("name"))
        dur = float(e.get("dur", 0))
        by_type[op].append(dur)
        detail = _shape_text(args.get("shapes")) or args.get("node") or e.get("name", "")
        by_layer[f"{op} [{detail}]"].append(dur)
        if args.get("framework"):
            frameworks.add(str(args["framework"]))
    total = sum(float(e.get("dur", 0)) for e in ops)
    return Breakdown(
        frameworks=sorted(frameworks), op_events=len(ops), outside=outside, op_total_us=total,
        predict_spans=len(predicts), predict_total_us=sum(b - a for a, b in predicts) if predicts else None,
        by_type=_rows(by_type, total), by_layer=_rows(by_layer, total),
    )


def summary_lines(b: Breakdown) -> list[str]:
    """The totals under the tables, in words."""
    lines = [f"{b.op_events} operator events ({', '.join(b.frameworks) or 'unknown framework'}), "
             f"{b.op_total_us / 1000:.3f} ms in operators"]
    if b.predict_total_us is not None:
        overhead, share = b.overhead_us or 0.0, b.overhead_share or 0.0
        lines.append(f"{b.predict_spans} predict calls, {b.predict_total_us / 1000:.3f} ms measured end to "
                     f"end; framework overhead {overhead / 1000:.3f} ms ({100 * share:.1f}%)")
    else:
        lines.append("the trace has no predict spans: framework overhead unknown")
    if b.outside:
        lines.append(f"{b.outside} operator events outside the predict calls (warm-up) are not counted")
    return lines


def markdown(b: Breakdown, top: int = 20) -> str:
    out = []
    tables = (("Operators by type", b.by_type), ("Operators by layer (type and input shapes)", b.by_layer))
    for title, rows in tables:
        out += [f"### {title}", "", "| operator | count | total (ms) | mean (us) | share |",
                "|---|---:|---:|---:|---:|"]
        for r in rows[:top]:
            out.append(f"| {r.key.replace('|', '/')} | {r.count} | {r.total_us / 1000:.3f} | "
                       f"{r.mean_us:.1f} | {100 * r.share:.1f}% |")
        if len(rows) > top:
            rest = rows[top:]
            out.append(f"| ({len(rest)} more) | {sum(r.count for r in rest)} | "
                       f"{sum(r.total_us for r in rest) / 1000:.3f} |  | "
                       f"{100 * sum(r.share for r in rest):.1f}% |")
        out.append("")
    out += [f"- {line}" for line in summary_lines(b)]
    return "\n".join(out) + "\n"
