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

from mlharness.calibration import server_bound
from mlharness.calibration.asked import Asked
from mlharness.calibration.calibrate import Calibration, apply, effective_conf
from mlharness.calibration.estimate import EARLY_STOPPING_QUERIES
from mlharness.calibration.stated import count_given_by, given_by
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.pipeline_report import summarize

PLAYED = 8  # samples played together (fewer where fewer are in the dataset)
TIMED_PLAYS = 2  # timed plays of them; the fastest reading is kept
SERVER_SHARE = 0.5


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
    if plan.mode != "performance":
        return {"calibrated": False, "reason": "accuracy mode"}
    b = (plan.latency_bound or {}).get("target_latency") if plan.scenario == "Server" else None
    derive = b is not None and b.get("kind") == "default" and not official
    source = given_by(plan.scenario, plan.model, plan.overrides, asked.user_conf)
    if not asked.calibrate and not derive:
        return {"calibrated": False, "reason": "--no-calibrate"}
    if source is not None and not derive:
        return {"calibrated": False, "reason": f"expected performance given by {source}"}
    t0 = time.perf_counter()
    one_s, rate, summary = measure(sut, loader, perf_count, warmup)
    if derive:
        ms = server_bound.derived_ms(one_s * 1e3)
        settings.server_target_latency_ns = int(ms * 1e6)
        b.update(ms=ms, kind="derived", single_sample_p99_ms=one_s * 1e3,
                 source=f"one sample's measured latency through the stages: max(10 ms, 5 x {one_s * 1e3:.4g} ms)")
        plan.not_submittable.append(f"the Server latency bound {ms:g} ms was derived from one sample's latency")
        asked.tell(f"Server latency bound: p99 <= {ms:g} ms, from {b['source']}")
    if source is not None or not asked.calibrate:
        return {"calibrated": False, "reason": f"expected performance given by {source or '--no-calibrate'}"}
    scenario = plan.scenario
    if scenario == "SingleStream":
        key, value, headroom = "target_latency", one_s * 1e3, 1.0
    elif scenario == "Offline":
        key, value, headroom = "target_qps", rate, 1.0
    else:  # the latency tail counts: half of what the stages sustained together, never of a bound above it
        key, value, headroom = "target_qps", SERVER_SHARE * min(rate, summary["throughput"] or rate), SERVER_SHARE
    cal = Calibration(scenario, key, value, measured=one_s * 1e3 if key == "target_latency" else rate,
                      headroom=headroom, samples_measured=summary["samples"], queries_measured=1,
                      seconds=time.perf_counter() - t0, batch=1,
                      extra={"sample_ms": one_s * 1e3, "slowest_stage_bound_per_s": rate})
    # a Server run too short for early stopping is INVALID whatever its latencies: ask for enough queries, as a
    # model's Server calibration does, unless the user stated the count
    if (scenario == "Server" and count_given_by(plan, asked.user_conf) is None
            and int(settings.min_query_count) < EARLY_STOPPING_QUERIES
            and value * int(settings.min_duration_ms) / 1000.0 < EARLY_STOPPING_QUERIES):
        cal.extra["min_query_count"] = EARLY_STOPPING_QUERIES
    apply(cal, settings)
    asked.tell(f"calibrated: {'expected latency' if key == 'target_latency' else 'target QPS'} {value:.4g} "
               f"{cal.unit}, from {summary['samples']} samples played through the stages (the slowest stage's "
               "workers over its median call time)")
    (outdir / "user.conf").write_text(effective_conf(plan.user_conf, plan.model, plan.scenario,
                                                     plan.overrides.given(), cal))
    return cal.as_dict()
