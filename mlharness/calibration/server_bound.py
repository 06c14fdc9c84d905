"""The latency bound a Server (or Interactive) run is held to, and where it comes from.

LoadGen judges a Server run by the 99th percentile of its latencies against ``target_latency`` (token models:
``ttft_latency`` and ``tpot_latency``), looked up in the embedded mlperf.conf and then in the user.conf, each
file exact key first (``model.Server.key``), then ``*.Server.key``, ``model.*.key`` and ``*.*.key``. Nothing in
LoadGen's output says which line won, so :func:`resolve` repeats that lookup and names it: the benchmark's line
of mlperf.conf, mlperf.conf's ``*`` default, a user.conf line, or ``--target-latency-ms``.

mlperf.conf's ``*`` default (10 ms) is a placeholder for models that are not MLPerf benchmarks: it has nothing to
do with such a model's speed, and a model slower than it can never be VALID. So for a model with no
``mlperf.model`` whose user set no bound, the bound follows from the model's own single-sample latency, measured
on loaded samples before LoadGen starts (:func:`derived_ms`): ``max(10 ms, 5 x the p99 of batch-1 runs)``,
rounded up to a whole millisecond. Five times the single-sample time leaves room for the queueing a Server run
adds at a useful rate (an ideal queue at about half load keeps its p99 within a few service times).

A token-stream model that is not an MLPerf benchmark has no ``ttft_latency``/``tpot_latency`` line in mlperf.conf,
and LoadGen's built-in 100 ms for each has nothing to do with it either. Its bounds follow the same rule from one
generation at a time, measured by :mod:`mlharness.kinds.tokens.calibrate` before LoadGen starts
(:func:`derive_token_bounds`): TPOT = ``max(1 ms, 5 x the single-request TPOT p99)``, and TTFT = ``max(10 ms, 5 x
the single-request p99 of a whole generation)``: under Server arrivals a request can wait for a generation in
flight (an engine that batches statically starts it only when the batch ahead ends), so its first token is
judged against the time a generation takes, not against a prefill alone.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.calibration.asked import Asked
from mlharness.calibration.server_probe import one_sample_runner
from mlharness.loadgen import settings as lgs

log = logging.getLogger(__name__)

DERIVED_MULTIPLE = 5.0  # derived bound = this x the single-sample p99 ...
DERIVED_FLOOR_MS = 10.0  # ... and never below mlperf.conf's own default
MEASURE_MIN_RUNS, MEASURE_MAX_RUNS, MEASURE_BUDGET_S = 8, 200, 0.5  # the single-sample timing pass
TOKEN_FLOOR_MS = {"ttft_latency": DERIVED_FLOOR_MS, "tpot_latency": 1.0}
TOKEN_BASIS = {"ttft_latency": "single-request generation p99 (time to its last token: a request can wait for "
                               "one in flight)", "tpot_latency": "single-request time-per-output-token p99"}
SETTING_ATTR = {"target_latency": "server_target_latency_ns", "ttft_latency": "ttft_latency",
                "tpot_latency": "tpot_latency"}


@dataclass
class LatencyBound:
    key: str  # target_latency (or ttft_latency / tpot_latency for token models)
    ms: float
    source: str  # where it comes from, in words (file and line, or the flag)
    kind: str  # flag | user.conf | benchmark | default | derived
    single_sample_p99_ms: float | None = None  # measured before the run, when measured

    def line(self) -> str:
        what = {"target_latency": "p99 latency", "ttft_latency": "p99 time to first token",
                "tpot_latency": "p99 time per output token"}[self.key]
        measured = (f"; one sample at a time measured p99 {self.single_sample_p99_ms:.4g} ms"
                    if self.single_sample_p99_ms is not None and self.kind != "derived" else "")
        if self.single_sample_p99_ms is not None and self.single_sample_p99_ms > self.ms:
            measured += (f": no rate meets this bound (--target-latency-ms {derived_ms(self.single_sample_p99_ms):g} "
                         "is one the model can)")
        return f"Server latency bound: {what} <= {self.ms:.6g} ms, from {self.source}{measured}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _lookup(lines: list[tuple[int, str, str, str, str]], model: str, key: str) -> tuple[int, str, str, str] | None:
    """LoadGen's order: model.Server.key, *.Server.key, model.*.key, *.*.key; a later line of the same name wins."""
    for m, s in ((model, "Server"), ("*", "Server"), (model, "*"), ("*", "*")):
        found = [(no, lm, ls, v) for no, lm, ls, k, v in lines if (lm, ls, k) == (m, s, key)]
        if found:
            return found[-1]
    return None


def resolve(plan: lgs.SettingsPlan, settings: Any, key: str = "target_latency") -> LatencyBound:
    """The bound of ``key`` in the built ``settings`` and which flag, file and line set it."""
    ms = float(getattr(settings, SETTING_ATTR[key])) / 1e6
    if key == "target_latency" and plan.overrides.target_latency_ms is not None:
        return LatencyBound(key, ms, "the command line (--target-latency-ms)", "flag")
    if plan.user_conf is not None and Path(plan.user_conf).is_file():
        hit = _lookup(lgs.parse_conf(lgs.read_conf(Path(plan.user_conf)), str(plan.user_conf)), plan.model, key)
        if hit:
            no, m, s, v = hit
            return LatencyBound(key, ms, f"the user.conf {plan.user_conf}, line {no} ({m}.{s}.{key} = {v})",
                                "user.conf")
    hit = _lookup(lgs.parse_conf(lgs.embedded_mlperf_conf(), "mlperf.conf"), plan.model, key)
    if hit is None:
        return LatencyBound(key, ms, "LoadGen's built-in default", "default")
    no, m, s, v = hit
    if m == "*":
        return LatencyBound(key, ms, f"mlperf.conf's default for models that are not MLPerf benchmarks (line {no}: "
                            f"{m}.{s}.{key} = {v})", "default")
    return LatencyBound(key, ms, f"the benchmark's line of mlperf.conf (line {no}: {m}.{s}.{key} = {v})",
                        "benchmark")


def no_rate_reason(extra: dict[str, Any]) -> str:
    """The calibration line of a Server run whose measured batches leave no rate within the bound."""
    bound, times = extra.get("latency_bound_ms", 0), extra.get("batch_ms") or {}
    over = [(k, v) for k, v in sorted(times.items()) if v > bound]
    if over:
        return (f"a trickle: one batch of {over[0][0]} measured {over[0][1]:.4g} ms, over the latency bound "
                f"{bound:.4g} ms, so no rate keeps it")
    return f"a trickle: the measured batches leave no rate within the latency bound {bound:.4g} ms"


def derived_ms(single_p99_ms: float, floor_ms: float = DERIVED_FLOOR_MS) -> float:
    return float(math.ceil(max(floor_ms, DERIVED_MULTIPLE * single_p99_ms)))


def token_bounds_to_derive(plan: lgs.SettingsPlan, network: str | None = None) -> list[str]:
    """The TTFT/TPOT keys of a non-benchmark token model's Server performance run that nobody bounded (LoadGen's
    built-in default), which kinds/tokens/calibrate.py derives from the model's single-request latency."""
    if plan.scenario != "Server" or plan.mode != "performance" or plan.official or network == "lon":
        return []
    return [k for k, b in (plan.latency_bound or {}).items()
            if k in TOKEN_FLOOR_MS and b.get("kind") == "default"]


def derive_token_bounds(plan: lgs.SettingsPlan, settings: Any, measured_ms: dict[str, float]) -> list[str]:
    """Set the derived TTFT/TPOT bounds (``measured_ms``: key -> the single-request p99 it is derived from) in
    ``settings`` and ``plan.latency_bound``, record them as not submittable; returns the lines to print."""
    lines = []
    for key in token_bounds_to_derive(plan):
        if measured_ms.get(key) is None:
            continue
        b = LatencyBound(**plan.latency_bound[key])
        b.single_sample_p99_ms = float(measured_ms[key])
        b.ms = derived_ms(b.single_sample_p99_ms, TOKEN_FLOOR_MS[key])
        b.kind = "derived"
        b.source = (f"{DERIVED_MULTIPLE:g} x the measured {TOKEN_BASIS[key]} {b.single_sample_p99_ms:.4g} ms, at "
                    f"least {TOKEN_FLOOR_MS[key]:g} ms, as the model is not an MLPerf benchmark; set your own with "
                    f"--user-conf and a line '{plan.model}.Server.{key} = N' (whole ms)")
        setattr(settings, SETTING_ATTR[key], int(b.ms * 1e6))
        plan.latency_bound[key] = b.as_dict()
        plan.not_submittable.append(f"the Server {key} bound {b.ms:g} ms was derived from the model's measured "
                                    "latency, not set by an MLPerf benchmark")
        lines.append(b.line())
    return lines


def measure_single_sample(pipeline: Any, loader: Any, perf_count: int, warmup: int = 1) -> float:
    """p99 milliseconds of the model on one sample at a time (pre, predict, post), on up to 8 samples loaded for
    the purpose (unloaded afterwards), after a warm-up; at least MEASURE_MIN_RUNS runs, about MEASURE_BUDGET_S."""
    indices = list(range(max(1, min(perf_count, 8))))
    progress, loader.on_progress = loader.on_progress, None
    loader.load(indices)
    try:
        pipeline.warmup(np.asarray(indices[:1], dtype=np.int64), max(1, warmup))
        laps: list[float] = []
        run_one = one_sample_runner(pipeline)  # as a Server query goes, untraced
        start = time.perf_counter()
        while len(laps) < MEASURE_MAX_RUNS and (len(laps) < MEASURE_MIN_RUNS
                                                or time.perf_counter() - start < MEASURE_BUDGET_S):
            t0 = time.perf_counter()
            run_one(indices[len(laps) % len(indices)])
            laps.append(time.perf_counter() - t0)
    finally:
        loader.unload(indices)
        loader.on_progress = progress
    return 1e3 * float(np.percentile(np.asarray(laps), 99))


def for_run(asked: Asked, plan: lgs.SettingsPlan, settings: Any, pipelines: list[Any], loader: Any, perf_count: int,
            official: bool, tokens: bool, warmup: int = 1) -> dict[str, Any] | None:
    """The runner's step, before calibration (which plans the rate against the bound): resolve the bound,
    measure the single-sample latency, derive the bound of a non-benchmark model nobody bounded, say so; the
    result is kept in ``plan.latency_bound`` for the run metadata and the INVALID explanation."""
    if plan.scenario != "Server":
        return None
    # a token model whose round turns token latencies off (qwen3-vl-235b-a22b) is bounded end to end
    token_latencies = tokens and bool(getattr(settings, "use_token_latencies", True))
    keys = ("ttft_latency", "tpot_latency") if token_latencies else ("target_latency",)
    bounds = [resolve(plan, settings, k) for k in keys]
    local = pipelines and asked.network != "lon" and not tokens
    if plan.mode == "performance" and local:
        b = bounds[0]
        try:
            b.single_sample_p99_ms = measure_single_sample(pipelines[0], loader, perf_count, warmup)
        except Exception as e:  # noqa: BLE001 - the LoadGen test meets the same failure and fails the run (exit 3)
            log.warning("timing one sample at a time failed (%s: %s); the Server bound stays as set", type(e).__name__, e)
        if not official and b.kind == "default" and b.single_sample_p99_ms is not None:
            b.ms = derived_ms(b.single_sample_p99_ms)
            b.source = (f"the model's measured latency: max({DERIVED_FLOOR_MS:g} ms, {DERIVED_MULTIPLE:g} x the "
                        f"single-sample p99 {b.single_sample_p99_ms:.4g} ms), as the model is not an MLPerf "
                        f"benchmark and no --target-latency-ms or user.conf line sets one")
            b.kind = "derived"
            settings.server_target_latency_ns = int(b.ms * 1e6)
            plan.not_submittable.append(f"the Server latency bound {b.ms:g} ms was derived from the model's "
                                        "measured latency, not set by an MLPerf benchmark")
    plan.latency_bound = {b.key: b.as_dict() for b in bounds}
    later = token_bounds_to_derive(plan, asked.network) if token_latencies else []
    if plan.mode == "performance":
        for b in bounds:
            if b.key not in later:  # said once derived, by kinds/tokens/calibrate.py
                asked.tell(b.line())
    return plan.latency_bound


__all__ = ["LatencyBound", "derive_token_bounds", "derived_ms", "for_run", "measure_single_sample", "no_rate_reason",
           "resolve", "token_bounds_to_derive"]
