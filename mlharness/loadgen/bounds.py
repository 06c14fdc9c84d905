"""The type and range of every number a run hands LoadGen or a framework, checked before either sees it.

LoadGen reads a user.conf's whole-number settings with ``strtoull``: ``-1`` becomes 2**64-1, ``1e2`` becomes 1
and ``010`` is octal 8. It crashes natively on some values (a ``samples_per_query`` of 0, a query count near
2**64), runs forever on others (an expected latency of 0) and raises a bare ``TypeError`` or ``ValueError`` on
NaN, infinity or a negative count set from Python. The frameworks start one thread per count they are given.
So each setting has a kind (whole or real), a range and a unit here, and the error names where the value came
from: the flag, the file and line, or the manifest and its field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlharness import numbers
from mlharness.errors import SettingsError

MAX_QUERIES = 10**9  # LoadGen builds its whole query schedule in memory before the test starts
MAX_SAMPLES = 10**8  # dataset samples, performance/accuracy sample counts
MAX_DURATION_MS = 10**9  # about 11.5 days
MAX_LATENCY_MS = 10**7  # about 2.8 hours
MAX_QPS = 10**8
MAX_SAMPLES_PER_QUERY = 10**6
MAX_BATCH = 2**20
MAX_INSTANCES = 256
MAX_WORKERS = numbers.MAX_WORKERS
MAX_THREADS = 1024  # the ceiling the predictors apply to framework.options thread counts too
MAX_WAIT_MS = 60_000
MAX_WARMUP = 10_000  # batches run before timing starts; the run waits for all of them
UINT64_MAX = 2**64 - 1
_THREADS_WHY = "more is a typo, and a thread pool that large can abort the process"


@dataclass(frozen=True)
class Bound:
    whole: bool  # an integer is required
    low: float  # the smallest value allowed (or the limit the value must exceed, with low_open)
    high: float | None = None  # the largest value allowed
    low_open: bool = False
    unit: str = ""  # " ms"
    why: str = ""  # appended to a range error: what the limit is, or how to write the value
    zero_ok: bool = False  # 0 (off, no limit) is allowed besides the range
    low_why: str = ""  # appended to an error about the low end only ('0: no limit')
    high_why: str = ""  # appended to an error about the ceiling only

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` ('must be > 0 ms, got 0'), or None (:func:`mlharness.numbers.problem`)."""
        return numbers.problem(value, minimum=self.low, maximum=self.high, integer=self.whole, above=self.low_open,
                               zero_ok=self.zero_ok, unit=self.unit, why=self.why, low_why=self.low_why,
                               high_why=self.high_why)


fmt = numbers.fmt


def _whole(low: float, high: float | None, **kw: Any) -> Bound:
    return Bound(True, low, high, **kw)


def _real(low: float, high: float | None, **kw: Any) -> Bound:
    return Bound(False, low, high, **kw)


# ------------------------------------------------------------------------------------------ command-line flags

FLAG_BOUNDS: dict[str, Bound] = {
    "--count": _whole(1, MAX_SAMPLES),
    "--min-duration-ms": _whole(0, MAX_DURATION_MS, unit=" ms"),
    "--min-query-count": _whole(0, MAX_QUERIES),
    "--max-query-count": _whole(0, MAX_QUERIES, low_why="0: no limit"),
    "--target-qps": _real(0, MAX_QPS, low_open=True),
    "--target-latency-ms": _real(0, MAX_LATENCY_MS, low_open=True, unit=" ms"),
    "--samples-per-query": _whole(1, MAX_SAMPLES_PER_QUERY),
    "--performance-sample-count": _whole(1, MAX_SAMPLES),
    "--max-batchsize": _whole(1, MAX_BATCH),
    "--batch-sizes": _whole(1, MAX_BATCH),
    "--server-max-wait-ms": _real(0, MAX_WAIT_MS, unit=" ms"),
    "--threads": _whole(1, MAX_THREADS, high_why=_THREADS_WHY),
    "--threads-per-instance": _whole(1, MAX_THREADS, high_why=_THREADS_WHY),
    "--workers": _whole(1, MAX_WORKERS),
    "--instances": _whole(1, MAX_INSTANCES),
    "--load-workers": _whole(0, MAX_THREADS, high_why=_THREADS_WHY),
    "--telemetry-interval-ms": _real(10, 3_600_000, unit=" ms", zero_ok=True, low_why="0 turns sampling off"),
    "--seconds": _real(0, 86_400, low_open=True, unit=" s"),
    "--steps": _whole(1, 100),
}
# RunOptions fields (and its overrides') and the flag each comes from, for errors that name the flag
RUN_OPTION_FLAGS = {
    "count": "--count", "max_batchsize": "--max-batchsize", "server_max_wait_ms": "--server-max-wait-ms",
    "threads": "--threads", "instances": "--instances", "threads_per_instance": "--threads-per-instance",
    "workers": "--workers", "load_workers": "--load-workers",
    "telemetry_interval_ms": "--telemetry-interval-ms",
}  # fmt: skip
OVERRIDE_FLAGS = {
    "min_duration_ms": "--min-duration-ms", "min_query_count": "--min-query-count",
    "max_query_count": "--max-query-count", "target_qps": "--target-qps",
    "target_latency_ms": "--target-latency-ms",
    "samples_per_query": "--samples-per-query", "performance_sample_count": "--performance-sample-count",
}  # fmt: skip
_DEVICE = re.compile(r"^(cpu|cuda(:(0|[1-9][0-9]{0,3}))?)$")


def check_flag(flag: str, value: Any) -> None:
    """Raise SettingsError('--target-qps: must be > 0, got 0') unless ``value`` is in the flag's range."""
    if value is None:
        return
    if flag == "--device":
        check_device(value)
        return
    for item in value if isinstance(value, list | tuple) else [value]:
        problem = FLAG_BOUNDS[flag].problem(item)
        if problem:
            raise numbers.flag(flag).fail(problem)


def check_device(device: Any) -> None:
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise SettingsError(f"--device: expected cpu, cuda or cuda:N (the devices the predictors know), "
                            f"got {device!r}")


def check_args(args: Any) -> None:
    """Every bounded flag a parsed command line has (``mlharness tune``, ``submission run``)."""
    for flag in (*FLAG_BOUNDS, "--device"):
        check_flag(flag, getattr(args, flag.lstrip("-").replace("-", "_"), None))


def check_run_options(values: Mapping[str, Any], overrides: Any, device: str) -> None:
    """A run's numbers (``values``: option name -> value, for the names of RUN_OPTION_FLAGS), its LoadGen
    overrides and its device, each error naming the flag the value comes from."""
    for name, flag in RUN_OPTION_FLAGS.items():
        check_flag(flag, values.get(name))
    for name, flag in OVERRIDE_FLAGS.items():
        check_flag(flag, getattr(overrides, name))
    check_device(device)


# ------------------------------------------------------------------------------------------ user.conf values

_BOOL = _whole(0, 1, why="0 or 1")
_SEED = _whole(0, UINT64_MAX)
# In LoadGen's units: milliseconds for durations and latencies, a percent for the percentile and probability.
CONF_BOUNDS: dict[str, Bound] = {
    "min_duration": _whole(0, MAX_DURATION_MS, unit=" ms"),
    "max_duration": _whole(0, MAX_DURATION_MS, unit=" ms", low_why="0: no limit"),
    "min_query_count": _whole(0, MAX_QUERIES),
    "max_query_count": _whole(0, MAX_QUERIES, low_why="0: no limit"),
    "performance_sample_count_override": _whole(0, MAX_SAMPLES, low_why="0: the dataset's"),
    "accuracy_sample_count_override": _whole(0, MAX_SAMPLES, low_why="0: the dataset's"),
    "target_latency": _real(0, MAX_LATENCY_MS, low_open=True, unit=" ms"),
    "target_latency_percentile": _real(50, 100, why="a percent: 99 means the 99th percentile"),
    "target_qps": _real(0, MAX_QPS, low_open=True),
    "samples_per_query": _whole(1, MAX_SAMPLES_PER_QUERY),
    "max_async_queries": _whole(0, MAX_QUERIES, low_why="0: no limit"),
    "accuracy_log_sampling_target": _whole(0, MAX_QUERIES),
    "accuracy_log_probability": _real(0, 100, why="a percent"),
    "performance_issue_same_index": _whole(0, MAX_SAMPLES),
    "ttft_latency": _whole(0, MAX_LATENCY_MS, low_open=True, unit=" ms"),
    "tpot_latency": _whole(0, MAX_LATENCY_MS, low_open=True, unit=" ms"),
    "token_latency_scaling_factor": _whole(1, 10**6),
    "mode": _whole(0, 3),
    **{k: _BOOL for k in ("sample_concatenate_permutation", "performance_issue_unique",
                          "performance_issue_same", "print_timestamps", "coalesce_queries",
                          "use_token_latencies", "infer_token_latencies", "test05")},
    **{k: _SEED for k in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed", "accuracy_log_rng_seed",
                          "test05_qsl_rng_seed", "test05_sample_index_rng_seed", "test05_schedule_rng_seed")},
}
# Server's target_latency is read in whole milliseconds, and 0 is how the LLM benchmarks say 'bounded by TTFT
# and TPOT instead'; SingleStream/MultiStream read it as a real number and an expected latency of 0 never ends.
_SERVER_TARGET_LATENCY = _whole(0, MAX_LATENCY_MS, unit=" ms",
                                low_why="0: bounded by ttft_latency and tpot_latency")
_STAR_TARGET_LATENCY = _whole(0, MAX_LATENCY_MS, low_open=True, unit=" ms",
                              low_why="a '*' line also sets SingleStream's, which must be > 0")
_WHOLE_LITERAL = re.compile(r"^\+?(0[xX][0-9a-fA-F]+|0|[1-9][0-9]*)$")


def conf_value_problem(key: str, scenario: str, raw: str) -> str | None:
    """What is wrong with ``raw`` as the value of ``key`` in a ``*.<scenario>.<key>`` line, or None. ``raw`` is
    known to be a number LoadGen parses; keys without a bound here are left to the other checks."""
    bound = CONF_BOUNDS.get(key)
    if bound is None:
        return None
    if key == "target_latency" and scenario in ("Server", "*"):
        bound = _SERVER_TARGET_LATENCY if scenario == "Server" else _STAR_TARGET_LATENCY
    value = _parse(raw)
    if bound.whole and math.isfinite(value) and value >= 0:
        if not _WHOLE_LITERAL.match(raw) and _strtoull(raw) != value:  # '1.0' is read as meant, '1e2' is not
            if re.match(r"^\+?0[0-9]", raw):
                return (f"'{raw}' starts with 0, so LoadGen reads it as octal ({_strtoull(raw)}); "
                        "write it without the leading 0")
            return f"must be a whole number written in digits: LoadGen reads '{raw}' as {_strtoull(raw)}"
        value = int(raw.lstrip("+"), 0) if _WHOLE_LITERAL.match(raw) else _strtoull(raw)
    return bound.problem(value)


def _strtoull(raw: str) -> int:
    """What C's strtoull(raw, NULL, 0) returns for a non-negative ``raw``: the longest prefix it can read."""
    s = raw.lstrip("+")
    base, digits = (16, s[2:]) if s[:2].lower() == "0x" else (8, s) if s.startswith("0") else (10, s)
    valid = {16: "0123456789abcdefABCDEF", 8: "01234567", 10: "0123456789"}[base]
    n = 0
    while n < len(digits) and digits[n] in valid:
        n += 1
    return int(digits[:n], base) if n else 0


def _parse(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        return float.fromhex(raw)


# ------------------------------------------------------------------------------------------- manifest numbers

_THREAD_OPTIONS = ("intra_op_num_threads", "inter_op_num_threads", "inter_op_threads")
_MANIFEST_BOUNDS = {
    "batching.max_batchsize": _whole(1, MAX_BATCH),
    **{f"batching.{s}": _whole(1, MAX_BATCH) for s in ("SingleStream", "MultiStream", "Server", "Offline")},
    "batching.server_max_wait_ms": _real(0, MAX_WAIT_MS, unit=" ms"),
    "framework.warmup": _whole(0, MAX_WARMUP, why="batches run before timing starts"),
    **{f"framework.options.{k}": _whole(0, MAX_THREADS, high_why=_THREADS_WHY,
                                        low_why="0: the framework's default") for k in _THREAD_OPTIONS},
}  # fmt: skip


def check_manifest_numbers(loaded: Any) -> None:
    """The batch sizes, warm-up and thread counts of a loaded manifest; ManifestError names the file and the field.
    An input kind's own parameters (a pipeline's stage list) are checked by its package (``kinds.check_inputs``)."""
    m = loaded.model
    for name, bound in _MANIFEST_BOUNDS.items():
        section, _, key = name.partition(".")
        holder = getattr(m, section)
        if key.startswith("options."):
            options = holder.options
            key = key.removeprefix("options.")
            if key not in options:
                continue
            value = options[key]
        else:
            value = getattr(holder, key)
        if value is None:
            continue
        problem = bound.problem(value)
        if problem:
            raise numbers.manifest(loaded.path, name).fail(problem)
    workers = loaded.dataset.load_workers if loaded.dataset is not None else None
    if workers is not None:
        problem = _whole(0, MAX_THREADS, high_why=_THREADS_WHY, low_why="0: one per core").problem(workers)
        if problem:
            raise numbers.manifest((loaded.dataset_source or loaded.source).path, "load_workers").fail(problem)
