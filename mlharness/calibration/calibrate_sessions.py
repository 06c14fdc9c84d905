"""Calibration and the Server bound of a session model (``response.kind: session``): simple and end to end.

A session is one LoadGen sample, so what LoadGen is told is a session's end-to-end time: one session (the first
loaded) is played once to warm the engine up and once timed, think times included, before LoadGen starts. That
time is SingleStream's expected latency, Offline's expected rate (the loaded sessions over it: they overlap), and
Server's rate at half of one session at a time (sessions overlap too; LoadGen's Poisson arrivals need room). A
Server run is judged by LoadGen on whole sessions (``target_latency``): the bound is resolved as for any model, and
for a model that is not an MLPerf benchmark with no bound given it follows from the timed session (5 x, as
:func:`~mlharness.calibration.server_bound.derived_ms` does for one sample). Playing one session is not a model of
a busy server's queue: state ``--target-qps`` (``--session-rate``) or ``--target-latency-ms`` to be exact.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mlharness.calibration import server_bound
from mlharness.calibration.asked import Asked
from mlharness.calibration.calibrate import Calibration, apply, effective_conf
from mlharness.calibration.stated import given_by
from mlharness.loadgen import settings as lgs

SERVER_SHARE = 0.5  # Server's planned rate: this share of one session at a time


def time_one_session(sut: Any, loader: Any, warmup: int) -> float:
    """Seconds of the first session, played once after ``warmup`` (at least one) untimed plays."""
    progress, loader.on_progress = loader.on_progress, None
    loader.load([0])
    try:
        for _ in range(max(1, warmup)):
            sut.play_once(0)
        t0 = time.perf_counter()
        sut.play_once(0)
        return time.perf_counter() - t0
    finally:
        loader.unload([0])
        loader.on_progress = progress


def bound(asked: Asked, plan: lgs.SettingsPlan, settings: Any, official: bool) -> dict[str, Any] | None:
    """The Server bound of whole sessions (``target_latency``), before calibration derives one if needed."""
    return server_bound.for_run(asked, plan, settings, [], None, 0, official, tokens=False)


def for_run(asked: Asked, plan: lgs.SettingsPlan, settings: Any, sut: Any, loader: Any, perf_count: int,
            warmup: int, outdir: Path, official: bool) -> dict[str, Any]:
    """The runner's step for a session model: time one session where the run needs an expected performance (or a
    Server bound), set it, say so and write the effective user.conf; returns what the run metadata keeps."""
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
    session_s = time_one_session(sut, loader, warmup)
    if derive:
        ms = server_bound.derived_ms(session_s * 1e3)
        settings.server_target_latency_ns = int(ms * 1e6)
        b.update(ms=ms, kind="derived", single_sample_p99_ms=session_s * 1e3,
                 source=f"one session's measured latency: max(10 ms, 5 x {session_s * 1e3:.4g} ms), as the model is "
                        "not an MLPerf benchmark and no --target-latency-ms or user.conf line sets one")
        plan.not_submittable.append(f"the Server latency bound {ms:g} ms was derived from one session's latency")
        asked.tell(f"Server latency bound: whole sessions p99 <= {ms:g} ms, from {b['source']}")
    if source is not None or not asked.calibrate:
        return {"calibrated": False, "reason": f"expected performance given by {source or '--no-calibrate'}",
                "session_ms": session_s * 1e3}
    scenario = plan.scenario
    if scenario == "SingleStream":
        key, value, headroom = "target_latency", session_s * 1e3, 1.0
    elif scenario == "Offline":
        key, value, headroom = "target_qps", max(1, perf_count) / session_s, 1.0
    else:
        key, value, headroom = "target_qps", SERVER_SHARE / session_s, SERVER_SHARE
    cal = Calibration(scenario, key, value, measured=session_s * 1e3 if key == "target_latency" else 1 / session_s,
                      headroom=headroom, samples_measured=1, queries_measured=1,
                      seconds=time.perf_counter() - t0, batch=1, extra={"session_ms": session_s * 1e3})
    apply(cal, settings)
    asked.tell(f"calibrated: {'expected latency' if key == 'target_latency' else 'target QPS'} "
               f"{value:.4g} {cal.unit}, from one session played in {session_s * 1e3:.4g} ms (think times "
               "included) after a warm-up play")
    (outdir / "user.conf").write_text(effective_conf(plan.user_conf, plan.model, plan.scenario,
                                                     plan.overrides.given(), cal))
    return cal.as_dict()
