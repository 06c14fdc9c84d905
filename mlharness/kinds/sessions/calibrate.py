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

from mlharness.calibration import played
from mlharness.calibration.asked import Asked
from mlharness.calibration.played import SERVER_SHARE
from mlharness.loadgen import settings as lgs


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


def for_run(asked: Asked, plan: lgs.SettingsPlan, settings: Any, sut: Any, loader: Any, perf_count: int,
            warmup: int, outdir: Path, official: bool) -> dict[str, Any]:
    """The runner's step for a session model (:func:`mlharness.calibration.played.for_run`): time one session
    where the run needs an expected performance (or a Server bound); returns what the run metadata keeps."""
    def play() -> played.Played:
        session_s = time_one_session(sut, loader, warmup)
        return played.Played(
            session_s, offline_qps=max(1, perf_count) / session_s, server_qps=SERVER_SHARE / session_s,
            measured_qps=1 / session_s, samples=1, one="one session", bound_from="one session's measured latency",
            bound_why=", as the model is not an MLPerf benchmark and no --target-latency-ms or user.conf line sets one",
            judged="whole sessions ",
            how=f"from one session played in {session_s * 1e3:.4g} ms (think times included) after a warm-up play",
            extra={"session_ms": session_s * 1e3}, given_extra={"session_ms": session_s * 1e3})

    return played.for_run(asked, plan, settings, outdir, official, play)
