"""How many queries and samples LoadGen will issue for the effective TestSettings, and about how long that takes
at the expected performance (LoadGen's own rules, ``test_settings_internal.cc`` and ``loadgen.cc``):

- Offline: ONE query of ``max(min_query_count, 1.1 * min_duration_s * expected_qps)`` samples; at the expected
  rate it lasts about 1.1 x min_duration.
- Server, SingleStream, MultiStream: queries at the target QPS (Server) or one after another at the expected
  latency (SingleStream/MultiStream, ``samples_per_query`` samples each) until the run has lasted min_duration AND
  issued min_query_count queries; ``max_query_count`` and ``max_duration`` cap both.
- Accuracy mode: every sample of the dataset once (one query in Offline), however long that takes.

LoadGen's expected value carries deliberate headroom when calibration set it (Offline asks for more samples than
the system is expected to finish in min_duration, the streams for more queries), so the time is estimated at the
rate the model was measured at (:func:`note_expected`) when there is one. An accuracy run without one gives no
time: LoadGen's expected value is then a placeholder, and the progress display measures the first samples.

One vocabulary for tensor and token models (:func:`calibration_line`, :func:`rate_from`): "measured" is what
calibration timed, "calibrated" only names the LoadGen setting it set from that, "from calibration" (or "from the
first samples") the rate a run is estimated at, and "stated" a setting a flag or a user.conf gave.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

OFFLINE_SLACK = 1.1  # LoadGen's kSlack
# TestSettings -> the rate a calibrated run is expected to reach (Offline: samples/s; the streams: queries/s)
_EXPECTED: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def note_expected(settings: Any, rate: float) -> None:
    """Estimate the run of these settings at ``rate``, the rate calibration expects from the model's measured
    timing (samples/s for Offline and Server, queries/s for the streams), rather than at LoadGen's expected value,
    which calibration sets with headroom."""
    if rate > 0:
        _EXPECTED[settings] = float(rate)


def rate_text(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.4g}"


def rate_from(value: float, unit: str, source: str = "calibration") -> str:
    """``85.3 samples/s (from calibration)``: the rate a run is expected at, and the model timing it comes from
    (calibration, the run's first samples)."""
    return f"{rate_text(value)} {unit} (from {source})"


def calibration_line(setting: str, value: str, timing: str, how: str) -> str:
    """The line a calibration prints, tensor and token models alike: the LoadGen setting it calibrated, then
    what it measured (``timing``, said after 'measured') and how the one follows from the other."""
    return (f"calibrated {setting}: {value} (measured {timing}; {how}; --no-calibrate or a user.conf line turns "
            f"this off)")


@dataclass
class Estimate:
    scenario: str
    mode: str  # performance or accuracy
    queries: int
    samples: int
    seconds: float | None  # at the expected performance; None when the settings give no rate
    rate: str  # where the expected rate comes from, for the message
    at_least: bool  # Server/SingleStream/MultiStream run longer when the system is slower than expected

    def line(self) -> str:
        per = self.samples // max(self.queries, 1)
        if self.scenario == "Offline":
            what = f"1 query of {self.samples:,} samples"
        else:
            what = (f"{'at least ' if self.at_least else ''}{self.queries:,} queries of {per:,} "
                    f"sample{'s' if per != 1 else ''}")
        text = f"{self.scenario} {self.mode} run: LoadGen will issue {what}"
        if self.seconds is not None:
            text += f"; about {format_duration(self.seconds)} at {self.rate}"
        elif self.mode == "accuracy":  # no measured rate: the placeholder expected value would be a wrong figure
            text += "; the rate and the time left follow from the first samples"
        return text


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _name(value: Any) -> str:
    return str(value).rsplit(".", 1)[-1]


def estimate_run(settings: Any, dataset_samples: int | None = None) -> Estimate:
    """The estimate for LoadGen TestSettings (``mlperf_loadgen.TestSettings`` or any object with its fields);
    ``dataset_samples`` is what an accuracy run issues."""
    scenario, mode = _name(settings.scenario), _name(settings.mode)
    accuracy = mode == "AccuracyOnly"
    min_s = settings.min_duration_ms / 1000.0
    min_queries = max(int(settings.min_query_count), 1)
    spq = int(settings.multi_stream_samples_per_query) if scenario == "MultiStream" else 1
    if scenario == "Offline":
        qps = float(settings.offline_expected_qps)
        rate = f"the stated {rate_text(qps)} samples/s (expected QPS, not measured)"
    elif scenario == "Server":
        qps = float(settings.server_target_qps)
        rate = f"the target {rate_text(qps)} queries/s"
    else:
        latency_ns = float(settings.single_stream_expected_latency_ns if scenario == "SingleStream"
                           else settings.multi_stream_expected_latency_ns)
        qps = 1e9 / latency_ns if latency_ns > 0 else 0.0
        rate = f"the stated latency of {latency_ns / 1e6:,.3f} ms per query (expected latency, not measured)"
    query_rate = qps  # queries/s; for Offline, samples/s
    expected = _EXPECTED.get(settings) if settings in _EXPECTED else None
    if accuracy:  # only a measured rate: LoadGen's expected value is a placeholder in accuracy mode
        samples = int(dataset_samples or 0)
        queries = 1 if scenario == "Offline" else max(samples // spq, 1)
        if not expected:
            return Estimate(scenario, "accuracy", queries, samples, None, "", False)
        if scenario == "Server" and 0 < qps < expected:  # issued on LoadGen's schedule, slower than the model
            return Estimate(scenario, "accuracy", queries, samples, queries / qps, rate, False)
        if scenario in ("Offline", "Server"):
            return Estimate(scenario, "accuracy", queries, samples, samples / expected,
                            rate_from(expected, 'samples/s'), False)
        return Estimate(scenario, "accuracy", queries, samples, queries / expected,
                        rate_from(1000.0 / expected, 'ms per query'), False)
    if scenario == "Offline":
        samples = max(min_queries, int(OFFLINE_SLACK * min_s * qps))
        if expected:  # LoadGen's value asks for more samples than the run is expected to finish in min_duration
            qps, rate = expected, rate_from(expected, 'samples/s')
        return Estimate(scenario, "performance", 1, samples, samples / qps if qps > 0 else None, rate, False)
    if expected and scenario != "Server":  # queries are issued until min_duration at the rate the run reaches
        query_rate = expected
        rate = rate_from(1000.0 / expected, 'ms per query')
    queries = max(min_queries, math.ceil(min_s * query_rate))
    if settings.max_query_count > 0:
        queries = min(queries, int(settings.max_query_count))
    seconds = queries / query_rate if query_rate > 0 else None
    if seconds is not None and settings.max_duration_ms > 0:
        seconds = min(seconds, settings.max_duration_ms / 1000.0)
    return Estimate(scenario, "performance", queries, queries * spq, seconds, rate, True)


LONG_RUN_FACTOR = 10  # a Server plan longer than this x min_duration says why and how to shorten it
# LoadGen's early stopping (99th percentile, 99% confidence) accepts a Server run's p99 after 459 queries when none
# was over the bound, after 662 when one was; a run sized for it asks for EARLY_STOPPING_QUERIES, room for one
EARLY_STOPPING_NONE_OVER, EARLY_STOPPING_ONE_OVER, EARLY_STOPPING_QUERIES = 459, 662, 700


def long_server_plan(qps: float, min_query_count: int, min_duration_ms: int, ideal_qps: float, bound_ms: float,
                     raised: bool, bound_flag: str = "--target-latency-ms") -> str | None:
    """Why a calibrated Server plan lasts more than LONG_RUN_FACTOR x min_duration, and the development shortcut
    that shortens it (None when it does not). ``raised``: calibration raised min_query_count for early stopping;
    ``bound_flag``: how this run's bound is loosened."""
    min_s = min_duration_ms / 1000.0
    queries = max(min_query_count, 1)
    seconds = max(queries, min_s * qps) / max(qps, 1e-9)
    if seconds <= LONG_RUN_FACTOR * max(min_s, 1e-3):
        return None
    fewer = max(1, int(LONG_RUN_FACTOR * min_s * qps))
    if ideal_qps <= 0:
        why = (f"no rate keeps the {bound_ms:g} ms latency bound (one batch alone is slower), so the rate is a "
               f"trickle of {qps:.4g} QPS")
    else:
        why = f"{queries} queries at {qps:.4g} QPS" + (
            f" (early stopping needs {EARLY_STOPPING_NONE_OVER} queries to accept the 99th percentile when none is "
            f"over the bound, {EARLY_STOPPING_ONE_OVER} when one is)" if raised else "")
    return (f"this Server run lasts about {format_duration(seconds)}, more than {LONG_RUN_FACTOR}x "
            f"--min-duration-ms: {why}. Development shortcut: --min-query-count {fewer} (about "
            f"{format_duration(max(fewer, min_s * qps) / max(qps, 1e-9))}; an explicit count is kept, and the run is "
            f"recorded as not submittable; with fewer than {EARLY_STOPPING_NONE_OVER} queries LoadGen calls it "
            f"INVALID for early stopping alone); or a looser bound ({bound_flag}) or a faster model")
