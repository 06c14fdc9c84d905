"""Calibration of a pipeline model (``response.kind: pipeline``): play a few samples through the stages together
before LoadGen starts, then tell LoadGen what it needs.

A pipeline's rate is its slowest stage's: each stage's workers over its median call time, measured on those
plays after a warm-up play of them all (every worker's first call untimed), the faster of two plays kept.
That is an upper bound of what the pipeline sustains, never under it (a few samples' plays are mostly the filling
and emptying of the stages), so an Offline development run sized from it lasts at least ``--min-duration-ms``
(a run sized from a rate under the real one ends early and is INVALID). SingleStream's expected latency is one
sample's time through every stage; Server's rate is half the rate the stages sustained together (the lower of
the bound and the play's throughput), its latency bound derived like a session's, its query count raised for early
stopping as a model's Server calibration raises it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mlharness.calibration import played
from mlharness.calibration.asked import Asked
from mlharness.calibration.played import SERVER_SHARE
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.pipeline_report import summarize

PLAYED = 8  # samples played together (fewer where fewer are in the dataset)
TIMED_PLAYS = 2  # timed plays of them; the fastest reading is kept


def stage_bound(summary: dict[str, Any]) -> float | None:
    """The slowest stage's bound from the play's median call times (each stage's workers over its p50): a first
    call that sets up a thread pool or a connection is an outlier that a mean would let lower the rate."""
    bounds = [s["workers"] / (s["latency_ms"]["p50"] / 1e3) for s in summary["stages"]
              if s["latency_ms"]["p50"]]
    return min(bounds) if bounds else None


def measure(sut: Any, loader: Any, perf_count: int, warmup: int) -> tuple[float, float, dict[str, Any]]:
    """(one sample's seconds through the stages, the slowest stage's bound in samples/s, the play's summary).

    The warm-up plays every sample together, so each worker of each stage has made its first call (torch's thread
    pool, an HTTP connection) before anything is timed: a warm-up of one sample warms one worker only, and the
    others' set-up then fell inside the timed play and read the rate low (an Offline run sized from it ends before
    --min-duration-ms: INVALID). Reading too high only lengthens a run."""
    n = max(1, min(PLAYED, perf_count))
    progress, loader.on_progress = loader.on_progress, None
    indices = list(range(n))
    loader.load(indices)
    deadline = sum(lane.spec.timeout_s * lane.spec.max_visits for lane in sut.lanes) * n
    try:
        for _ in range(max(1, warmup)):
            sut.play(indices, deadline)
        t0 = time.perf_counter()
        sut.play([0], deadline)
        one_s = time.perf_counter() - t0
        best, summary = 0.0, {}
        for _ in range(TIMED_PLAYS):
            t0 = time.perf_counter()
            jobs = sut.play(indices, deadline)
            this = summarize(sut.lanes, jobs, time.perf_counter() - t0)
            rate = max(stage_bound(this) or this["slowest_stage_bound_per_s"] or 0.0, this["throughput"] or 0.0)
            if rate >= best:
                best, summary = rate, this
    finally:
        loader.unload(indices)
        loader.on_progress = progress
    return one_s, best or n / max(summary["wall_s"], 1e-9), summary


def for_run(asked: Asked, plan: lgs.SettingsPlan, settings: Any, sut: Any, loader: Any, perf_count: int,
            warmup: int, outdir: Path, official: bool) -> dict[str, Any]:
    """The runner's step for a pipeline model (:func:`mlharness.calibration.played.for_run`): Server at half of
    what the stages sustained together, never of a bound above it, with enough queries for early stopping."""
    def play() -> played.Played:
        one_s, rate, summary = measure(sut, loader, perf_count, warmup)
        return played.Played(
            one_s, offline_qps=rate, server_qps=SERVER_SHARE * min(rate, summary["throughput"] or rate),
            measured_qps=rate, samples=summary["samples"], one="one sample",
            bound_from="one sample's measured latency through the stages",
            how=f"from {summary['samples']} samples played through the stages (the slowest stage's workers over "
                "its median call time)",
            extra={"sample_ms": one_s * 1e3, "slowest_stage_bound_per_s": rate}, early_stopping=True)

    return played.for_run(asked, plan, settings, outdir, official, play)
