"""The session kind's row: one sample is one multi-turn session, played by the predictors' chat engines
(``sut.py``; docs/sessions.md), timed whole by LoadGen, calibrated by playing one (``calibrate.py``); its input
is a ``type: session`` input (``input.py``) and its records get a report section (``plots.py``)."""

from __future__ import annotations

from typing import Any

from mlharness.kinds.base import Kind, Parts, played_bound, played_calibration
from mlharness.kinds.sessions import calibrate
from mlharness.kinds.sessions.input import make_input, session_settings
from mlharness.kinds.sessions.sut import SessionSUT, make_players, session_engines


def make_sut(p: Parts) -> Any:
    loaded = p.run.loaded
    spec = loaded.model.inputs[0]
    settings = session_settings(spec.parameters, loaded.path)
    players, close = make_players(session_engines(p.predictors, loaded), settings.replay,
                                  loaded.model.generation.max_new_tokens)
    p.sut = SessionSUT(players, p.store, p.conf.plan.scenario, settings, outdir=p.outdir, on_failure=p.on_failure,
                       warmup=loaded.model.framework.warmup, close=close)
    return p.sut


KIND = Kind("session", make_input=make_input, make_sut=make_sut, server_bound=played_bound,
            calibrate=played_calibration(calibrate.for_run), report="mlharness.kinds.sessions.plots:section",
            rows="mlharness.kinds.sessions.report:session_rows",
            not_multistream="one sample is a whole session of turns, played in order with its think times; run "
            "SingleStream (one session at a time), Server (sessions at a rate: --target-qps, or mlharness replay "
            "--session-rate) or Offline (every session at once, or at most N in flight: mlharness replay "
            "--concurrency N)")
