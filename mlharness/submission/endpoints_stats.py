"""The latency rollups of an endpoints-style ``result_summary.json`` (the MLCommons endpoints client's report
shape), computed from measured values: min, max, mean, median, standard deviation, the percentile grid and
LoadGen's early-stopping estimate of each tail percentile.

The official submission checker reads a result's tail latencies from ``<series>.early_stopping_percentiles``
(``ENDPOINTS_MAPPINGS``), not from the plain percentiles: the early-stopping estimate is LoadGen's conservative
bound (``loadgen/early_stopping.cc``, ``results.cc``), the ``t``-th highest of ``n`` sorted values, where ``t``
is the largest count of over-latency samples a run of ``n`` samples can absorb while the true percentile still
lies under the value at 99 % confidence. Too few samples make no claim: the estimate is then ``None``, as the
endpoints client writes it. Percentiles use the order statistic the endpoints report uses (``numpy``'s
``method="lower"``: index ``floor(p * (n - 1))``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

CONFIDENCE = 0.99  # LoadGen's fixed confidence (tolerance 0)
# the endpoints client's report grid; early-stopping estimates for the entries at or above the median
GRID = ("99.9", "99.0", "95.0", "90.0", "80.0", "75.0", "50.0", "25.0", "10.0")


def _binomial_cdf(k: int, n: int, q: float) -> float:
    """P(X <= k) for X ~ Binomial(n, q), summed in log space so that thousands of trials do not underflow."""
    if k >= n:
        return 1.0
    log_q, log_p = math.log(q), math.log1p(-q)
    base = math.lgamma(n + 1)
    return math.fsum(math.exp(base - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_q + (n - i) * log_p)
                     for i in range(k + 1))


def min_passing(t: int, p: float, c: float = CONFIDENCE) -> int:
    """LoadGen's MinPassingQueriesFinder: the fewest under-latency samples ``h`` that, beside ``t`` over-latency
    ones, show the ``p`` percentile is met at confidence ``c`` (the chance of at most ``t`` overs among ``h + t``
    samples at an over rate of ``1 - p`` falls under ``1 - c``)."""
    lo, hi = 1, 2
    while _binomial_cdf(t, hi + t, 1.0 - p) >= 1.0 - c:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _binomial_cdf(t, mid + t, 1.0 - p) < 1.0 - c:
            hi = mid
        else:
            lo = mid + 1
    return lo


def early_stopping_estimate(ordered: Sequence[float], p: float) -> float | None:
    """The early-stopping estimate of the ``p`` percentile (a fraction) of ascending ``ordered`` values, None
    when there are fewer than LoadGen's minimum (``min_passing(1, p) + 1``; 64 at the 90th percentile)."""
    n = len(ordered)
    if n < min_passing(1, p) + 1:
        return None
    lo, hi = 1, 2  # the largest t with min_passing(t) + t <= n
    while min_passing(hi, p) + hi <= n:
        hi *= 2
    while lo < hi - 1:
        mid = (lo + hi) // 2
        if min_passing(mid, p) + mid <= n:
            lo = mid
        else:
            hi = mid
    return ordered[n - lo]


def series(values: Sequence[float]) -> dict[str, Any]:
    """The endpoints report's rollup of one series (``total``, ``min``, ``max``, ``median``, ``avg``,
    ``std_dev``, ``percentiles``, ``early_stopping_percentiles``); an empty dict for no values, as the endpoints
    client writes a series it has no samples of."""
    if not values:
        return {}
    ordered = sorted(values)
    n = len(ordered)
    grid = {key: ordered[int(float(key) / 100.0 * (n - 1))] for key in GRID}
    return {
        "total": math.fsum(ordered),
        "count": n,
        "min": ordered[0],
        "max": ordered[-1],
        "median": grid["50.0"],
        "avg": math.fsum(ordered) / n,
        "std_dev": statistics.stdev(ordered) if n > 1 else 0.0,
        "percentiles": grid,
        "early_stopping_percentiles": {key: early_stopping_estimate(ordered, float(key) / 100.0)
                                       for key in GRID if float(key) >= 50.0},
    }
