"""Calibration by a play before LoadGen starts, for the kinds whose samples are played whole by a SUT of their own
(``session``, ``pipeline``): one skeleton, each kind's measurement and words.

The skeleton: nothing in accuracy mode; a Server run with no latency bound given (and not official) derives one
from the measured one-sample time (5 x, :func:`~mlharness.calibration.server_bound.derived_ms`), played even with
``--no-calibrate``; an expected performance the user gave is kept; otherwise the scenario's value is set from the
play (SingleStream's expected latency: one sample's time; Offline's and Server's rates: the kind's), LoadGen is
told, and the effective user.conf is written beside the results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.calibration import server_bound
from mlharness.calibration.asked import Asked
from mlharness.calibration.calibrate import Calibration, apply, effective_conf
from mlharness.calibration.estimate import EARLY_STOPPING_QUERIES
from mlharness.calibration.stated import count_given_by, given_by
from mlharness.loadgen import settings as lgs

SERVER_SHARE = 0.5  # Server's planned rate: this share of what the play sustained (LoadGen's Poisson arrivals)


@dataclass
class Played:
    """What one kind's play measured, and how the run says so.

    ``one_s``: one sample's seconds end to end (SingleStream's expected latency, the derived Server bound's base);
    ``offline_qps`` and ``server_qps`` (the share already applied): the rates the scenarios are told;
    ``measured_qps``: the rate the calibration record keeps as measured; ``samples``: how many the play measured.
    Words: ``one`` names the unit played ("one sample"); ``bound_from`` what the derived bound comes from,
    ``bound_why`` why it is derived, ``judged`` what the Server bound judges; ``how`` ends the calibrated line."""

    one_s: float
    offline_qps: float
    server_qps: float
    measured_qps: float
    samples: int
    one: str
    bound_from: str
    how: str
    bound_why: str = ""
    judged: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # kept in the calibration record
    given_extra: dict[str, Any] = field(default_factory=dict)  # kept when the user gave the performance
    early_stopping: bool = False  # raise Server's min_query_count to what early stopping needs, unless stated


def for_run(asked: Asked, plan: lgs.SettingsPlan, settings: Any, outdir: Path, official: bool,
            measure: Callable[[], Played]) -> dict[str, Any]:
    """The runner's calibration step for a played kind: ``measure`` plays where the run needs an expected
    performance or a derived Server bound; the values are set, said and written to the effective user.conf.
    Returns what the run metadata keeps."""
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
    p = measure()
    one_ms = p.one_s * 1e3
    if derive:
        ms = server_bound.derived_ms(one_ms)
        settings.server_target_latency_ns = int(ms * 1e6)
        b.update(ms=ms, kind="derived", single_sample_p99_ms=one_ms,
                 source=f"{p.bound_from}: max(10 ms, 5 x {one_ms:.4g} ms){p.bound_why}")
        plan.not_submittable.append(f"the Server latency bound {ms:g} ms was derived from {p.one}'s latency")
        asked.tell(f"Server latency bound: {p.judged}p99 <= {ms:g} ms, from {b['source']}")
    if source is not None or not asked.calibrate:
        return {"calibrated": False, "reason": f"expected performance given by {source or '--no-calibrate'}",
                **p.given_extra}
    scenario = plan.scenario
    if scenario == "SingleStream":
        key, value, headroom = "target_latency", one_ms, 1.0
    elif scenario == "Offline":
        key, value, headroom = "target_qps", p.offline_qps, 1.0
    else:
        key, value, headroom = "target_qps", p.server_qps, SERVER_SHARE
    cal = Calibration(scenario, key, value, measured=one_ms if key == "target_latency" else p.measured_qps,
                      headroom=headroom, samples_measured=p.samples, queries_measured=1,
                      seconds=time.perf_counter() - t0, batch=1, extra=dict(p.extra))
    # a Server run too short for early stopping is INVALID whatever its latencies: ask for enough queries, as a
    # model's Server calibration does, unless the user stated the count
    if (p.early_stopping and scenario == "Server" and count_given_by(plan, asked.user_conf) is None
            and int(settings.min_query_count) < EARLY_STOPPING_QUERIES
            and value * int(settings.min_duration_ms) / 1000.0 < EARLY_STOPPING_QUERIES):
        cal.extra["min_query_count"] = EARLY_STOPPING_QUERIES
    apply(cal, settings)
    asked.tell(f"calibrated: {'expected latency' if key == 'target_latency' else 'target QPS'} {value:.4g} "
               f"{cal.unit}, {p.how}")
    (outdir / "user.conf").write_text(effective_conf(plan.user_conf, plan.model, plan.scenario,
                                                     plan.overrides.given(), cal))
    return cal.as_dict()
