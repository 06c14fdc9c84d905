"""Timed generations for calibration: bursts of concurrent requests, generations one at a time, and paced trials
at Poisson arrival times, each request timed by a stream of its own (first token, end, token count)."""

from __future__ import annotations

import time

import numpy as np

from mlharness.calibration.calibrate import fast_quantile
from mlharness.errors import RunFailed
from mlharness.predictors.generative import GenerativePredictor, TokenRequest

SUT_SAMPLE_OVERHEAD_MS = 0.25  # the token SUT's cost per sample, beyond the predictor's own
LIMIT_MARGIN = 0.5  # a burst is acceptable when its slowest TTFT and TPOT are under half their limits
DRAIN_TIMEOUT_S = 900.0  # one calibration burst may take this long before the run fails
OFFLINE_GROWTH, OFFLINE_MAX_BURST = 1.25, 4096  # an Offline burst doubles while its rate grows this much, up to this
# the planned rate is then tried with Poisson arrivals (an engine that batches statically meets partial batches and
# waits for the batch in flight there, which bursts never show): halved while the trial's slowest TTFT or TPOT breaks
# LIMIT_MARGIN of a limit. The slowest, not the p99: early stopping accepts a 700-query run with at most one query
# over the bound (about the 99.86th percentile), and a trial's p99 under half the limit still left runs INVALID
PROBE_SECONDS, PROBE_MAX_REQUESTS, MAX_PROBES, PROBE_SEED = 1.5, 300, 4, 20261
ALONE_MIN_RUNS, ALONE_MAX_RUNS, ALONE_BUDGET_S = 8, 200, 1.0  # generations one at a time, for derived bounds


class Timing:
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
    def total_ms(self) -> float:
        """The whole request, as LoadGen times a sample when token latencies are off (an end-to-end bound)."""
        return (self.done_at - self.start) * 1000.0 + SUT_SAMPLE_OVERHEAD_MS

    @property
    def tpot_ms(self) -> float:
        if self.tokens < 2 or self.first_at is None:
            return 0.0
        return (self.done_at - self.first_at) * 1000.0 / (self.tokens - 1)


def timed_burst(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
           overhead: bool = True) -> tuple[float, list[Timing]]:
    """Submit every prompt at once (round robin over the instances, one request per submit as the Server SUT
    does); (seconds until the last one finished, plus the SUT's cost per sample unless ``overhead`` is False,
    their timings)."""
    timings = []
    start = time.perf_counter()
    for j, (index, prompt) in enumerate(prompts):
        timing = Timing()
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


def timed_rounds(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]], budget: float,
            overhead: bool = True) -> tuple[list[float], list[Timing]]:
    """Bursts of ``prompts`` until ``budget`` seconds have passed (one at least): their durations and timings."""
    seconds: list[float] = []
    timings: list[Timing] = []
    start = time.perf_counter()
    while not seconds or (time.perf_counter() - start < budget and len(seconds) < 10_000):
        s, t = timed_burst(predictors, prompts, overhead)
        seconds.append(s)
        timings += t
    return seconds, timings


def offline_bursts(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
                    budget: float) -> tuple[list[float], int, int]:
    """The Offline query submits every sample at once, and a server or engine that batches continuously is faster
    with more requests in flight than the few loaded samples make (a fake server took 1.8x the rate of bursts of 8,
    so a 2 s run ended short of its min_duration): the burst, the prompts repeated as the query repeats them,
    doubles while that raises the rate OFFLINE_GROWTH times and a doubled burst takes at most a quarter of the
    budget; an engine that batches statically gains nothing and keeps its burst. (the chosen burst's durations,
    the bursts timed, its size)"""
    burst, (seconds, _) = prompts, timed_rounds(predictors, prompts, budget)
    rounds = len(seconds)
    while 2 * len(burst) <= OFFLINE_MAX_BURST and 2 * fast_quantile(seconds) <= budget / 4:
        bigger = [prompts[i % len(prompts)] for i in range(2 * len(burst))]
        more, _ = timed_rounds(predictors, bigger, budget / 4)
        rounds += len(more)
        if len(bigger) / fast_quantile(more) < OFFLINE_GROWTH * len(burst) / fast_quantile(seconds):
            break
        burst, seconds = bigger, more
    return seconds, rounds, len(burst)


def single_request(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
                   budget: float = ALONE_BUDGET_S) -> dict[str, float]:
    """p99 milliseconds of generations one at a time over ``prompts`` (at least ALONE_MIN_RUNS, about ``budget``
    seconds): of the whole generation (``ttft_latency``'s basis) and of the time per output token."""
    timings: list[Timing] = []
    start = time.perf_counter()
    while len(timings) < ALONE_MIN_RUNS or (time.perf_counter() - start < budget and len(timings) < ALONE_MAX_RUNS):
        timings += timed_burst(predictors[:1], [prompts[len(timings) % len(prompts)]])[1]
    whole = [(t.done_at - t.start) * 1000.0 + SUT_SAMPLE_OVERHEAD_MS for t in timings]
    return {"ttft_latency": float(np.percentile(whole, 99)),
            "tpot_latency": float(np.percentile([t.tpot_ms for t in timings], 99))}


def paced(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]], qps: float,
           seed: int) -> list[Timing]:
    """Requests at Poisson arrival times of ``qps`` for about PROBE_SECONDS, each timed from its scheduled arrival."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / qps, size=max(1, min(PROBE_MAX_REQUESTS, int(qps * PROBE_SECONDS)))))
    timings = []
    start = time.perf_counter()
    for j, at in enumerate(arrivals):
        wait = start + at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        timing = Timing()
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


def worst(timings: list[Timing], end_to_end: bool) -> tuple[float, float]:
    """The slowest first-token time and time per output token of a trial; with ``end_to_end`` (token latencies
    off: LoadGen bounds the whole request) the first figure is the slowest whole request, and TPOT is not bounded."""
    if end_to_end:
        return max(t.total_ms for t in timings), 0.0
    return max(t.ttft_ms for t in timings), max(t.tpot_ms for t in timings)


def probed(predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]], qps: float,
            ttft_limit: float, tpot_limit: float, end_to_end: bool = False) -> tuple[float, list[dict[str, float]]]:
    """The rate after paced trials: halved while a trial's slowest TTFT or TPOT (with ``end_to_end``: its slowest
    request) breaks LIMIT_MARGIN of its limit."""
    probes = []
    for n in range(MAX_PROBES):
        timings = paced(predictors, prompts, qps, PROBE_SEED + n)
        ttft, tpot = worst(timings, end_to_end)
        ok = ttft <= LIMIT_MARGIN * ttft_limit and tpot <= LIMIT_MARGIN * tpot_limit
        probes.append({"qps": round(qps, 4), "requests": len(timings), "ttft_max_ms": round(ttft, 3),
                       "tpot_max_ms": round(tpot, 3), "ok": ok})
        if ok:
            return qps, probes
        qps /= 2
    return qps, probes
