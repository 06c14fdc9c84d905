"""Calibration of a pipeline model (``response.kind: pipeline``): play a few samples through the stages together
before LoadGen starts, then tell LoadGen what it needs.

A pipeline's rate is its slowest stage's (``pipeline_report.stage_bound``: each stage's workers over its median call
time; the play's own throughput where that is higher, kept as ``pipeline_rate_per_s``), measured on those
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
from mlharness.kinds.pipeline.report import summarize
from mlharness.loadgen import settings as lgs

PLAYED = 8  # samples played together (fewer where fewer are in the dataset)
TIMED_PLAYS = 2  # timed plays of them; the fastest reading is kept


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
            rate = max(this["slowest_stage_bound_per_s"] or 0.0, this["throughput"] or 0.0)
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
        together = min(rate, summary["throughput"] or rate)  # what the stages sustained together: Server's base
        measured = together if plan.scenario == "Server" else rate  # the value the scenario's headroom applies to
        return played.Played(
            one_s, offline_qps=rate, server_qps=SERVER_SHARE * together,
            measured_qps=measured, samples=summary["samples"], one="one sample",
            bound_from="one sample's measured latency through the stages", judged="samples through the stages ",
            bound_why=", as the model is not an MLPerf benchmark and no --target-latency-ms or user.conf line sets one",
            how=f"from {summary['samples']} samples played through the stages (the slowest stage's workers over "
                "its median call time)",
            extra={"sample_ms": one_s * 1e3, "pipeline_rate_per_s": rate,
                   "slowest_stage_bound_per_s": summary["slowest_stage_bound_per_s"],
                   "played_throughput_per_s": summary["throughput"]}, early_stopping=True)

    return played.for_run(asked, plan, settings, outdir, official, play)
