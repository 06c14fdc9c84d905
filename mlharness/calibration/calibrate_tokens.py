"""Expected performance of a token-stream (generative) run, measured before LoadGen starts.

The sizing problem of :mod:`mlharness.calibration.calibrate` (a wrong expected figure makes a run INVALID whatever the
system does), for a model whose response is a stream of tokens. The figures come from whole generations, submitted
to the predictor(s) directly on samples loaded for the purpose, after a warm-up:

- Offline: bursts of the loaded samples submitted at once (the engine batches them as it batches the Offline
  query), doubled while that raises the rate; expected QPS = 1.5 x the samples/s at the fast quantile of the bursts.
- SingleStream: one generation at a time; expected latency = 0.5 x the fast quantile of their durations.
- Server, and Interactive (a Server run under ``<model>-interactive``): the run is judged on the 99th percentile of
  the time to first token and of the time per output token against mlperf.conf's limits (``ttft_latency``,
  ``tpot_latency``). Bursts of ``k`` concurrent generations, ``k`` halved from the loaded count until every
  generation of the burst keeps both limits with margin; ``target_qps`` = 0.35 x that burst's samples/s, so that
  the engine holds about a third of ``k`` requests on average (Little's law) under Poisson arrivals.
  ``min_query_count`` is raised for early stopping as for any Server run (never a count the user stated: an
  explicit ``--min-query-count`` is the development shortcut, see :mod:`~mlharness.calibration.calibrate_dev`), and a
  plan that makes the run long says so before it starts, with that shortcut. When a generation alone breaks a
  limit no rate meets it: a trickle is set, and the run's explanation says why it is INVALID.
- The TTFT/TPOT bounds of a model that is not an MLPerf benchmark, where nobody set them, come from generations
  one at a time (:func:`single_request`, :func:`mlharness.calibration.server_bound.derive_token_bounds`), before the
  rate is calibrated against them.
- Accuracy runs of Server and Interactive get the same rate: LoadGen issues every sample at ``target_qps`` there
  too, and the package's generic 0.5/s would make an accuracy run of the 13368 samples last 7.4 hours whatever
  the model's speed.

The timings include the token SUT's own cost per sample (LoadGen's issue callback, the submission to the engine,
the first token and the completion), estimated as :data:`SUT_SAMPLE_OVERHEAD_MS`; it only matters for models that
answer in microseconds, such as a server whose Offline burst grew to hundreds of requests at once. The
timed bursts last about as long as :func:`~mlharness.calibration.calibrate.budget_seconds` says, but at least one
burst (and one generation alone) is always timed, however long the model takes.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.calibration import calibrate_dev, estimate, server_bound
from mlharness.calibration.asked import Asked
from mlharness.calibration.calibrate import (
    EARLY_STOPPING_QUERIES,
    LATENCY_HEADROOM,
    MAX_GENERATED_QUERIES,
    SERVER_FRACTION,
    Calibration,
    apply,
    budget_seconds,
    count_given_by,
    effective_conf,
    fast_quantile,
    fmt_value,
    given_by,
)
from mlharness.errors import RunFailed
from mlharness.loadgen import settings as lgs
from mlharness.predictors.generative import GenerativePredictor, TokenRequest

SUT_SAMPLE_OVERHEAD_MS = 0.25  # the token SUT's cost per sample, beyond the predictor's own
LIMIT_MARGIN = 0.5  # a burst is acceptable when its slowest TTFT and TPOT are under half their limits
DRAIN_TIMEOUT_S = 900.0  # one calibration burst may take this long before the run fails
MIN_SAMPLES = 16  # samples loaded for the measurement (fewer when the performance set is smaller)
# the Offline target over the measured token rate: token models keep the headroom their calibration was measured
# with (the image models' busy-host calibration in calibrate.py uses its own)
OFFLINE_HEADROOM = 1.5
OFFLINE_GROWTH, OFFLINE_MAX_BURST = 1.25, 4096  # an Offline burst doubles while its rate grows this much, up to this
# the planned rate is then tried with Poisson arrivals (an engine that batches statically meets partial batches and
# waits for the batch in flight there, which bursts never show): halved while the trial's slowest TTFT or TPOT breaks
# LIMIT_MARGIN of a limit. The slowest, not the p99: early stopping accepts a 700-query run with at most one query
# over the bound (about the 99.86th percentile), and a trial's p99 under half the limit still left runs INVALID
PROBE_SECONDS, PROBE_MAX_REQUESTS, MAX_PROBES, PROBE_SEED = 1.5, 300, 4, 20261
ALONE_MIN_RUNS, ALONE_MAX_RUNS, ALONE_BUDGET_S = 8, 200, 1.0  # generations one at a time, for derived bounds


class _Timing:
    """A stream that records when a generation's first token and its end came."""

    __slots__ = ("start", "first_at", "done_at", "tokens", "error")

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first_at: float | None = None
        self.done_at: float | None = None
        self.tokens = 0
        self.error: BaseException | None = None

    def first(self, ids: np.ndarray) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()

    def done(self, ids: np.ndarray, response: np.ndarray | None = None) -> None:
        self.tokens = int(np.asarray(ids).size)
        self.done_at = time.perf_counter()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done_at = time.perf_counter()

    @property
    def ttft_ms(self) -> float:
        first = self.first_at if self.first_at is not None else self.done_at
        return (first - self.start) * 1000.0 + SUT_SAMPLE_OVERHEAD_MS

    @property
    def tpot_ms(self) -> float:
        if self.tokens < 2 or self.first_at is None:
            return 0.0
        return (self.done_at - self.first_at) * 1000.0 / (self.tokens - 1)


def _burst(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
           overhead: bool = True) -> tuple[float, list[_Timing]]:
    """Submit every prompt at once (round robin over the instances, one request per submit as the Server SUT
    does); (seconds until the last one finished, plus the SUT's cost per sample unless ``overhead`` is False,
    their timings)."""
    timings = []
    start = time.perf_counter()
    for j, (index, prompt) in enumerate(prompts):
        timing = _Timing()
        predictors[j % len(predictors)].submit([TokenRequest(index, prompt)], [timing])
        timings.append(timing)
    for p in predictors:
        if not p.drain(timeout_s=DRAIN_TIMEOUT_S):
            raise RunFailed(f"calibration: {len(prompts)} generation(s) did not finish within {DRAIN_TIMEOUT_S:.0f} s;"
                            " state the expected performance (--target-qps, --target-latency-ms, a user.conf line) "
                            "or turn calibration off with --no-calibrate")
    seconds = time.perf_counter() - start
    failed = [(index, t.error) for (index, _), t in zip(prompts, timings, strict=True) if t.error is not None]
    if failed:
        index, error = failed[0]
        raise RunFailed(f"calibration: generating sample {index} (qsl_idx) failed before the LoadGen test: "
                        f"{type(error).__name__}: {error}") from error
    return seconds + (len(prompts) * SUT_SAMPLE_OVERHEAD_MS / 1000.0 if overhead else 0.0), timings


def _rounds(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]], budget: float,
            overhead: bool = True) -> tuple[list[float], list[_Timing]]:
    """Bursts of ``prompts`` until ``budget`` seconds have passed (one at least): their durations and timings."""
    seconds: list[float] = []
    timings: list[_Timing] = []
    start = time.perf_counter()
    while not seconds or (time.perf_counter() - start < budget and len(seconds) < 10_000):
        s, t = _burst(predictors, prompts, overhead)
        seconds.append(s)
        timings += t
    return seconds, timings


def _offline_bursts(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
                    budget: float) -> tuple[list[float], int, int]:
    """The Offline query submits every sample at once, and a server or engine that batches continuously is faster
    with more requests in flight than the few loaded samples make (a fake server took 1.8x the rate of bursts of 8,
    so a 2 s run ended short of its min_duration): the burst, the prompts repeated as the query repeats them,
    doubles while that raises the rate OFFLINE_GROWTH times and a doubled burst takes at most a quarter of the
    budget; an engine that batches statically gains nothing and keeps its burst. (the chosen burst's durations,
    the bursts timed, its size)"""
    burst, (seconds, _) = prompts, _rounds(predictors, prompts, budget)
    rounds = len(seconds)
    while 2 * len(burst) <= OFFLINE_MAX_BURST and 2 * fast_quantile(seconds) <= budget / 4:
        bigger = [prompts[i % len(prompts)] for i in range(2 * len(burst))]
        more, _ = _rounds(predictors, bigger, budget / 4)
        rounds += len(more)
        if len(bigger) / fast_quantile(more) < OFFLINE_GROWTH * len(burst) / fast_quantile(seconds):
            break
        burst, seconds = bigger, more
    return seconds, rounds, len(burst)


def single_request(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
                   budget: float = ALONE_BUDGET_S) -> dict[str, float]:
    """p99 milliseconds of generations one at a time over ``prompts`` (at least ALONE_MIN_RUNS, about ``budget``
    seconds): of the whole generation (``ttft_latency``'s basis) and of the time per output token."""
    timings: list[_Timing] = []
    start = time.perf_counter()
    while len(timings) < ALONE_MIN_RUNS or (time.perf_counter() - start < budget and len(timings) < ALONE_MAX_RUNS):
        timings += _burst(predictors[:1], [prompts[len(timings) % len(prompts)]])[1]
    whole = [(t.done_at - t.start) * 1000.0 + SUT_SAMPLE_OVERHEAD_MS for t in timings]
    return {"ttft_latency": float(np.percentile(whole, 99)),
            "tpot_latency": float(np.percentile([t.tpot_ms for t in timings], 99))}


def _paced(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]], qps: float,
           seed: int) -> list[_Timing]:
    """Requests at Poisson arrival times of ``qps`` for about PROBE_SECONDS, each timed from its scheduled arrival."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / qps, size=max(1, min(PROBE_MAX_REQUESTS, int(qps * PROBE_SECONDS)))))
    timings = []
    start = time.perf_counter()
    for j, at in enumerate(arrivals):
        wait = start + at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        timing = _Timing()
        timing.start = start + at
        index, prompt = prompts[j % len(prompts)]
        predictors[j % len(predictors)].submit([TokenRequest(index, prompt)], [timing])
        timings.append(timing)
    for p in predictors:
        if not p.drain(timeout_s=DRAIN_TIMEOUT_S):
            raise RunFailed(f"calibration: paced generations did not finish within {DRAIN_TIMEOUT_S:.0f} s")
    failed = [t.error for t in timings if t.error is not None]
    if failed:
        raise RunFailed(f"calibration: a paced generation failed before the LoadGen test: {failed[0]}") from failed[0]
    return timings


def _probed(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]], qps: float,
            ttft_limit: float, tpot_limit: float) -> tuple[float, list[dict[str, float]]]:
    """The rate after paced trials: halved while a trial's slowest TTFT or TPOT breaks LIMIT_MARGIN of its limit."""
    probes = []
    for n in range(MAX_PROBES):
        timings = _paced(predictors, prompts, qps, PROBE_SEED + n)
        ttft = max(t.ttft_ms for t in timings)
        tpot = max(t.tpot_ms for t in timings)
        ok = ttft <= LIMIT_MARGIN * ttft_limit and tpot <= LIMIT_MARGIN * tpot_limit
        probes.append({"qps": round(qps, 4), "requests": len(timings), "ttft_max_ms": round(ttft, 3),
                       "tpot_max_ms": round(tpot, 3), "ok": ok})
        if ok:
            return qps, probes
        qps /= 2
    return qps, probes


def measure(scenario: str, settings: Any, predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
            budget: float, keep_count: bool = False) -> Calibration:
    """The calibration of a LoadGen ``scenario`` (Interactive is 'Server') from generations of ``prompts``
    (``keep_count``: the user stated min_query_count, which is never raised)."""
    start = time.perf_counter()
    n = len(prompts)
    if scenario in ("SingleStream", "MultiStream"):
        seconds, _ = _rounds(predictors[:1], prompts[:1], budget)
        fast_ms = fast_quantile(seconds) * 1000.0
        floor_ms = 2.0 * int(settings.min_duration_ms) / MAX_GENERATED_QUERIES
        return Calibration(scenario, "target_latency", max(LATENCY_HEADROOM * fast_ms, floor_ms, 1e-3), fast_ms,
                           LATENCY_HEADROOM, 1, len(seconds), time.perf_counter() - start, 1,
                           {"median_ms": float(np.median(seconds)) * 1000.0, "token_streams": True})
    if scenario == "Offline":
        # one LoadGen query for all samples; each still costs the SUT its first token and completion (without that
        # cost a grown burst rated a fake server 3-5x what its run reached)
        seconds, rounds, n = _offline_bursts(predictors, prompts, budget)
        sps = n / fast_quantile(seconds)
        return Calibration(scenario, "target_qps", OFFLINE_HEADROOM * sps, sps, OFFLINE_HEADROOM, n, rounds,
                           time.perf_counter() - start, n, {"token_streams": True})
    return _server(settings, predictors, prompts, budget, start, keep_count)


def _server(settings: Any, predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
            budget: float, start: float, keep_count: bool = False) -> Calibration:
    ttft_limit, tpot_limit = int(settings.ttft_latency) / 1e6, int(settings.tpot_latency) / 1e6
    _, alone = _rounds(predictors[:1], prompts[:1], budget / 4)
    one_ttft = float(np.median([t.ttft_ms for t in alone]))
    one_tpot = float(np.median([t.tpot_ms for t in alone]))
    extra: dict[str, Any] = {"token_streams": True, "ttft_limit_ms": ttft_limit, "tpot_limit_ms": tpot_limit,
                             "alone_ttft_ms": one_ttft, "alone_tpot_ms": one_tpot}
    rounds = len(alone)
    if one_ttft > ttft_limit or one_tpot > tpot_limit:
        # no rate keeps the limits: a trickle, and the run explains the INVALID
        one_sps = 1000.0 / max(t.ttft_ms + t.tpot_ms * max(t.tokens - 1, 0) for t in alone)
        qps, sps, k = max(0.1, 0.1 * one_sps), one_sps, 1
    else:
        k = len(prompts)
        while True:
            seconds, timings = _rounds(predictors, prompts[:k], budget / 2)
            rounds += len(seconds)
            worst_ttft = max(t.ttft_ms for t in timings)
            worst_tpot = max(t.tpot_ms for t in timings)
            if k == 1 or (worst_ttft <= LIMIT_MARGIN * ttft_limit and worst_tpot <= LIMIT_MARGIN * tpot_limit):
                break
            k //= 2
        sps = k / fast_quantile(seconds)
        qps = SERVER_FRACTION * sps
        extra.update(concurrency=k, burst_ttft_ms=worst_ttft, burst_tpot_ms=worst_tpot)
        qps, extra["probes"] = _probed(predictors, prompts, qps, ttft_limit, tpot_limit)
    cal = Calibration("Server", "target_qps", qps, sps, SERVER_FRACTION, len(prompts), rounds,
                      time.perf_counter() - start, k, extra)
    min_s = int(settings.min_duration_ms) / 1000.0
    meets = "concurrency" in extra  # a trickle is INVALID whatever its length: more queries would not help
    if not keep_count and meets and int(settings.min_query_count) < EARLY_STOPPING_QUERIES and \
            qps * min_s < EARLY_STOPPING_QUERIES:
        cal.extra["min_query_count"] = EARLY_STOPPING_QUERIES
    long_run = estimate.long_server_plan(qps, int(cal.extra.get("min_query_count", settings.min_query_count)),
                                         int(settings.min_duration_ms), qps if meets else 0.0,
                                         min(ttft_limit, tpot_limit), "min_query_count" in cal.extra,
                                         "--user-conf lines '<model>.Server.ttft_latency/tpot_latency = N'")
    if long_run:
        cal.extra["long_run"] = long_run
    return cal


def _with_prompts(predictors: list[GenerativePredictor], store: Any, loader: Any, perf_count: int, warmup: int,
                  step: Any) -> Any:
    """``step(prompts)`` on a few samples loaded for the purpose (unloaded afterwards), after a warm-up."""
    indices = list(range(max(1, min(perf_count, MIN_SAMPLES))))
    progress, loader.on_progress = loader.on_progress, None
    loader.load(indices)
    try:
        prompts = [(i, store.gather(np.asarray([i], dtype=np.int64))[0][0]) for i in indices]
        for _ in range(max(1, warmup)):
            _burst(predictors, prompts[:len(predictors)])
        return step(prompts)
    finally:
        loader.unload(indices)
        loader.on_progress = progress


def calibrate(scenario: str, settings: Any, predictors: list[GenerativePredictor], store: Any, loader: Any,
              perf_count: int, warmup: int = 1, budget_s: float | None = None, keep_count: bool = False) -> Calibration:
    """Load a few samples, warm up, measure, unload; set the expected performance in ``settings``."""
    budget = budget_seconds(settings) if budget_s is None else budget_s
    cal = _with_prompts(predictors, store, loader, perf_count, warmup,
                        lambda prompts: measure(scenario, settings, predictors, prompts, budget, keep_count))
    cal.value = float(fmt_value(cal.value))  # exactly what the written user.conf says
    apply(cal, settings)
    # the run's time is estimated from the measured rate, as for a tensor model, not at the value set with headroom:
    # between the bursts' rate and that rate with all of the SUT's cost per sample (the bursts leave it out, a run
    # overlaps part of it); the token oracle's 2 s Offline runs took 8.6 and 11.7 s where the bursts' rate said 3.3
    with_sut = 1.0 / (1.0 / cal.measured + SUT_SAMPLE_OVERHEAD_MS / 1000.0)
    estimate.note_expected(settings, 1000.0 / cal.measured if cal.key == "target_latency"
                           else math.sqrt(cal.measured * with_sut))
    return cal


def one_line(cal: Calibration) -> str:
    """The calibration's line, in the words of a tensor model's (:func:`estimate.calibration_line`)."""
    if cal.key == "target_latency":
        setting, value = "expected latency", f"{fmt_value(cal.value)} ms"
        timing, how = f"{cal.measured:.4g} ms per generation", f"headroom x{cal.headroom:g}"
    elif cal.scenario == "Offline":
        setting, value = "expected QPS", f"{fmt_value(cal.value)} QPS"
        timing, how = f"{cal.measured:,.4g} samples/s in bursts of {cal.batch}", f"headroom x{cal.headroom:g}"
    else:
        e = cal.extra
        setting, value = "target QPS", f"{fmt_value(cal.value)} QPS"
        timing = (f"{cal.measured:,.4g} samples/s with {cal.batch} generation(s) at once, TTFT "
                  f"{e.get('burst_ttft_ms', e['alone_ttft_ms']):.4g} ms and TPOT "
                  f"{e.get('burst_tpot_ms', e['alone_tpot_ms']):.4g} ms against the limits "
                  f"{e['ttft_limit_ms']:g}/{e['tpot_limit_ms']:g} ms")
        how = f"{cal.headroom:g} x the measured rate"
        if "min_query_count" in e:
            how += f"; min_query_count raised to {e['min_query_count']} for early stopping"
        if len(e.get("probes", [])) > 1:
            how += "; lowered by paced trials (" + ", ".join(
                f"{p['qps']:.4g} QPS gave TTFT/TPOT at most {p['ttft_max_ms']:.4g}/{p['tpot_max_ms']:.4g} ms"
                for p in e["probes"][:-1]) + ")"
    line = estimate.calibration_line(setting, value, timing, how)
    return line + (f"\n{cal.extra['long_run']}" if "long_run" in cal.extra else "")


def for_run(asked: Asked, plan: lgs.SettingsPlan, settings: Any, predictors: list[GenerativePredictor], store: Any,
            loader: Any, perf_count: int, warmup: int, outdir: Path) -> dict[str, Any]:
    """The runner's step for a token-stream model: calibrate when the run needs it (performance runs, and the
    accuracy runs of Server/Interactive), say so, write the effective user.conf beside the logs; returns what goes
    into the run metadata under 'calibration'."""
    if server_bound.token_bounds_to_derive(plan, asked.network):
        # before the rate, which is calibrated against them
        measured = _with_prompts(predictors, store, loader, perf_count, warmup,
                                 lambda prompts: single_request(predictors, prompts))
        for line in server_bound.derive_token_bounds(plan, settings, measured):
            asked.tell(line)
    result = _calibrated(asked, plan, settings, predictors, store, loader, perf_count, warmup, outdir)
    # a development run is then sized from the expected rate, not from the dataset (calibrate_dev)
    sized = calibrate_dev.size(plan, settings, perf_count, floor=MIN_SAMPLES)
    if sized is not None:
        result["development_sizing"] = sized
        asked.tell(sized["message"])
    note = calibrate_dev.short_count_note(plan, settings, count_given_by(plan, asked.user_conf))
    if note:
        result["short_count"] = note
        asked.tell(note)
    return result


def _calibrated(asked: Asked, plan: lgs.SettingsPlan, settings: Any, predictors: list[GenerativePredictor],
                store: Any, loader: Any, perf_count: int, warmup: int, outdir: Path) -> dict[str, Any]:
    if plan.mode != "performance" and plan.scenario != "Server":
        return {"calibrated": False, "reason": "accuracy mode"}
    if not asked.calibrate:
        return {"calibrated": False, "reason": "--no-calibrate"}
    source = given_by(plan.scenario, plan.model, plan.overrides, asked.user_conf)
    if source is not None:
        return {"calibrated": False, "reason": f"expected performance given by {source}"}
    cal = calibrate(plan.scenario, settings, predictors, store, loader, perf_count, warmup,
                    keep_count=count_given_by(plan, asked.user_conf) is not None)
    if plan.mode != "performance":
        cal.extra.pop("min_query_count", None)  # an accuracy run issues every sample once whatever it says
    asked.tell(one_line(cal))
    (outdir / "user.conf").write_text(effective_conf(plan.user_conf, plan.model, plan.scenario,
                                                     plan.overrides.given(), cal))
    return cal.as_dict()


__all__ = ["SUT_SAMPLE_OVERHEAD_MS", "calibrate", "for_run", "measure", "one_line", "single_request"]
