"""The Server ceiling of a model on a machine: what an ideal harness could reach, from measured batch times.

LoadGen's Server sends one sample per query at Poisson arrival times. Simulating that stream against a queue
whose only cost is the model's own measured time per batch (greedy dynamic batching: a free instance takes
everything waiting, up to the batch size, and every sample of a batch completes when the batch does) gives
the latency distribution of a harness with zero overhead. The highest arrival rate whose simulated p99 stays
within the bound is then an upper limit for any VALID Server run on that machine with that batching: it tells
a harness problem (measured far below the ceiling) from a machine limit (the ceiling itself is low, as on a
CPU whose batches gain little over batch 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np


def batch_time_fn(batch_ms: Mapping[int, float]):
    """Milliseconds for a batch of n, linear between the measured sizes and proportional beyond the largest."""
    sizes = sorted(batch_ms)
    if not sizes or sizes[0] < 1:
        raise ValueError("batch times need at least one batch size >= 1")
    xs = np.array(sizes, dtype=float)
    ys = np.array([batch_ms[s] for s in sizes], dtype=float)

    def time_ms(n: int) -> float:
        if n >= xs[-1]:
            return float(ys[-1] * n / xs[-1])
        if n <= xs[0]:
            return float(ys[0])
        return float(np.interp(n, xs, ys))

    return time_ms


def simulate_server(qps: float, batch_ms: Mapping[int, float], max_batch: int = 1, instances: int = 1,
                    queries: int = 50_000, seed: int = 0,
                    take: Callable[[int, int], int] | None = None) -> np.ndarray:
    """Latencies (ms) of ``queries`` Poisson arrivals at ``qps`` through ``instances`` servers with greedy
    dynamic batching up to ``max_batch`` (or, with ``take(waiting, free_instances)``, that many of the waiting
    samples); the harness costs nothing."""
    if qps <= 0:
        raise ValueError("qps must be > 0")
    rng = np.random.default_rng(seed)
    return serve(np.cumsum(rng.exponential(1000.0 / qps, queries)), batch_ms, max_batch, instances, take)


def serve(arrivals: np.ndarray, batch_ms: Mapping[int, float], max_batch: int = 1, instances: int = 1,
          take: Callable[[int, int], int] | None = None, factors: np.ndarray | None = None) -> np.ndarray:
    """Latencies (ms) of the given arrival times (ms, ascending) through the zero-overhead queue of
    :func:`simulate_server`; batch ``b`` takes its batch time x ``factors[b % len(factors)]`` when given (measured
    service times over their median: the model's own jitter, which no harness removes)."""
    queries = len(arrivals)
    time_ms = batch_time_fn(batch_ms)
    cost = [0.0] + [time_ms(n) for n in range(1, max_batch + 1)]
    free = [0.0] * max(1, instances)
    lat = np.empty(queries)
    i = b = 0
    while i < queries:
        k = min(range(len(free)), key=free.__getitem__)
        start = max(free[k], arrivals[i])
        # everything that has arrived by the time this instance starts, up to the batch size
        j = min(int(np.searchsorted(arrivals, start, side="right")), i + max_batch, queries)
        j = max(j, i + 1)
        if take is not None:
            waiting = max(1, int(np.searchsorted(arrivals, start, side="right")) - i)
            j = i + max(1, min(take(waiting, sum(f <= start for f in free)), j - i))
        done = start + cost[j - i] * (float(factors[b % len(factors)]) if factors is not None else 1.0)
        lat[i:j] = done - arrivals[i:j]
        free[k] = done
        i = j
        b += 1
    return lat


def replay_ceiling(arrivals_ms: np.ndarray, batch_ms: Mapping[int, float], bound_ms: float, max_late: int,
                   max_batch: int = 1, take: Callable[[int, int], int] | None = None,
                   factors: np.ndarray | None = None, steps: int = 20) -> float:
    """The highest rate at which one LoadGen Server schedule, replayed through the zero-overhead queue, has at
    most ``max_late`` samples over ``bound_ms``. LoadGen draws a run's arrival gaps from a fixed seed and scales
    them by 1 / target_qps, so the schedule of the same trial at another rate is ``arrivals_ms`` rescaled: this
    is the ideal queue judged on exactly the trial a harness ran, not on an average one."""
    arrivals = np.asarray(arrivals_ms, dtype=float) - float(np.min(arrivals_ms))
    span = float(arrivals[-1]) if len(arrivals) > 1 else 0.0
    if span <= 0 or max_late < 0:
        return 0.0
    rate = 1000.0 * (len(arrivals) - 1) / span  # the rate the schedule was issued at

    def ok(qps: float) -> bool:
        lat = serve(arrivals * rate / qps, batch_ms, max_batch, 1, take, factors)
        return int(np.count_nonzero(lat > bound_ms)) <= max_late

    time_ms = batch_time_fn(batch_ms)
    return highest_passing(ok, 2000.0 * max(1, max_batch) / time_ms(max(1, max_batch)), steps)  # 2x throughput


def highest_passing(ok: Callable[[float], bool], hi: float, steps: int) -> float:
    """The highest rate in (0, ``hi``) that ``ok`` accepts, by bisection (0 when none does)."""
    lo = 0.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def early_stopping_late(queries: int, percentile: float = 99.0, confidence: float = 0.99) -> int:
    """How many of ``queries`` samples may be over the bound for early stopping to accept ``percentile``
    (-1: the run is too short to pass at all)."""
    pct = early_stopping_percentile(queries, percentile, confidence)
    return -1 if pct is None else round(queries * (1 - pct / 100.0))


def early_stopping_percentile(queries: int, percentile: float = 99.0, confidence: float = 0.99) -> float | None:
    """The percentile a run of ``queries`` samples must actually meet for LoadGen's early stopping to accept
    ``percentile``: with t samples over the bound, the run passes when P[Binomial(n, 1 - percentile/100) <= t]
    <= 1 - confidence, i.e. far fewer than 1% of a short run may be late. Returns 100 * (1 - t_max / n), or None
    when the run is too short to pass at all (fewer than ~460 queries at the 99th percentile)."""
    p = 1.0 - percentile / 100.0
    n = int(queries)
    log_q, log_p = math.log1p(-p), math.log(p)
    cdf, t_max = 0.0, -1
    for t in range(n + 1):
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(t + 1) - math.lgamma(n - t + 1) + t * log_p
                        + (n - t) * log_q)
        if cdf > 1.0 - confidence:
            break
        t_max = t
    return 100.0 * (1.0 - t_max / n) if t_max >= 0 else None


def server_ceiling(batch_ms: Mapping[int, float], bound_ms: float, max_batch: int = 1, instances: int = 1,
                   percentile: float = 99.0, queries: int = 50_000, steps: int = 24,
                   take: Callable[[int, int], int] | None = None) -> float:
    """The highest QPS whose simulated latency percentile is within ``bound_ms`` (bisection; 0 when even a
    trickle misses the bound, i.e. one batch alone takes longer)."""
    time_ms = batch_time_fn(batch_ms)
    if time_ms(1) > bound_ms:
        return 0.0
    best_batch = max(range(1, max_batch + 1), key=lambda n: n / time_ms(n))
    def ok(qps: float) -> bool:
        lat = simulate_server(qps, batch_ms, max_batch, instances, queries, take=take)
        return float(np.percentile(lat, percentile)) <= bound_ms

    return highest_passing(ok, instances * 1000.0 * best_batch / time_ms(best_batch), steps)  # the throughput limit


__all__ = ["batch_time_fn", "early_stopping_late", "early_stopping_percentile", "highest_passing", "replay_ceiling",
           "serve", "server_ceiling", "simulate_server"]
