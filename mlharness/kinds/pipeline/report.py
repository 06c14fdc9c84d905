"""A pipeline run's own records, beside LoadGen's logs: ``pipeline_results.jsonl`` (one line per completed sample:
its QSL index, LoadGen's query id, the item's ``result`` (null where the sample failed or was drained, i.e.
completed empty after a signal, so nothing of it is scored), whether it was drained, each stage visit's
queued/enter/leave times in seconds from the test's start, the visits per stage, the error) and
``pipeline_summary.json`` (per stage: samples, errors, latency p50/p90/p99/mean of a call, busy time, throughput
over the test, load time; the pipeline's own throughput; the slowest stage's bound, :func:`stage_bound`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.fileguard import read_json

RESULTS_FILE = "pipeline_results.jsonl"
SUMMARY_FILE = "pipeline_summary.json"


def record(job: Any, t0: float) -> dict[str, Any]:
    err = job.error
    return {"qsl_idx": job.index, "query_id": job.token,
            "result": job.item.get("result") if err is None and not job.drained else None,
            "drained": job.drained,
            "stages": [{"stage": v.stage, "queued_s": v.queued - t0, "enter_s": (v.enter - t0) if v.enter else None,
                        "leave_s": (v.leave - t0) if v.leave else None} for v in job.visits],
            "visits": job.counts(),
            "error": None if err is None else {"stage": err.stage, "sample": err.sample, "error": err.detail}}


def stage_bound(workers: int, p50_ms: float | None) -> float | None:
    """A stage's bound in samples/s: its workers over its median call time. The one definition the report and the
    calibration share; a median, since a first call that sets up a thread pool or a connection is an outlier that a
    mean would let lower the rate."""
    return workers / (p50_ms / 1e3) if p50_ms else None


def summarize(lanes: list[Any], jobs: list[Any], wall_s: float | None) -> dict[str, Any]:
    stages = []
    for lane in lanes:
        name = lane.spec.name
        calls = [v.leave - v.enter for j in jobs for v in j.visits if v.stage == name and v.enter and v.leave]
        errors = sum(1 for j in jobs if j.error is not None and j.error.stage == name)
        ms = np.asarray(calls) * 1e3 if calls else np.zeros(0)
        mean = float(ms.mean()) if calls else None
        stages.append({"stage": name, "framework": lane.spec.framework, "workers": lane.spec.workers,
                       "count": len(calls), "errors": errors,
                       "latency_ms": {"p50": _q(ms, 50), "p90": _q(ms, 90), "p99": _q(ms, 99), "mean": mean},
                       "busy_s": float(ms.sum() / 1e3), "load_s": lane.load_s,
                       "throughput": len(calls) / wall_s if wall_s else None,
                       "bound_per_s": stage_bound(lane.spec.workers, _q(ms, 50))})
    failed = sum(1 for j in jobs if j.error is not None)
    bounds = [s["bound_per_s"] for s in stages if s["bound_per_s"]]
    return {"samples": len(jobs), "failed": failed, "wall_s": wall_s,
            "throughput": len(jobs) / wall_s if wall_s else None,
            "slowest_stage_bound_per_s": min(bounds) if bounds else None, "stages": stages}


def _q(ms: np.ndarray, q: float) -> float | None:
    return float(np.percentile(ms, q)) if ms.size else None


def write_reports(outdir: Path, lanes: list[Any], jobs: list[Any], wall: list[float]) -> dict[str, Any]:
    t0 = wall[0] if wall else 0.0
    wall_s = wall[-1] - wall[0] if len(wall) >= 2 else None
    with open(outdir / RESULTS_FILE, "w", encoding="utf-8") as f:
        for job in sorted(jobs, key=lambda j: j.ended):
            f.write(json.dumps(record(job, t0), default=str) + "\n")
    summary = summarize(lanes, jobs, wall_s)
    (outdir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def stage_rows(outdir: Path) -> list[tuple[str, str]]:
    """A label and a line per stage for ``mlharness run``'s table, and the pipeline's own (none where the folder
    holds no pipeline run)."""
    if not (Path(outdir) / SUMMARY_FILE).is_file():
        return []
    summary = read_json(Path(outdir) / SUMMARY_FILE, "pipeline summary", allow_nan=True)
    rows = []
    for s in summary["stages"]:
        lat = s["latency_ms"]
        p50 = f"{lat['p50']:.3g}" if lat["p50"] is not None else "-"
        p99 = f"{lat['p99']:.3g}" if lat["p99"] is not None else "-"
        tput = f"{s['throughput']:.4g}/s" if s["throughput"] else "-"
        rows.append((f"stage {s['stage']}", f"{s['framework']}, {s['workers']} workers: {s['count']} calls, "
                     f"{s['errors']} errors, p50 {p50} ms, p99 {p99} ms, {tput}, load {s['load_s']:.3g} s"))
    if summary.get("throughput"):
        rows.append(("pipeline", f"{summary['samples']} samples ({summary['failed']} failed), "
                     f"{summary['throughput']:.4g}/s; slowest stage alone: "
                     f"{summary['slowest_stage_bound_per_s'] or 0:.4g}/s"))
    return rows
