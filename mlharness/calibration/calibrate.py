"""Expected performance, measured: size a performance run so that LoadGen can make it VALID.

LoadGen sizes a performance run from the system's *expected* performance, and a wrong guess makes the run
INVALID whatever the system does:

- SingleStream / MultiStream: LoadGen pre-generates ``max(min_query_count, 2 * min_duration / expected
  latency)`` queries. A system faster than half the expected latency runs out of queries before
  ``min_duration`` ("Ran out of generated queries"); a smaller expected latency only costs memory.
- Offline: the one query holds ``max(min_query_count, 1.1 * min_duration * target_qps)`` samples. A system
  faster than 1.1 x ``target_qps`` finishes it before ``min_duration``; a larger one only lengthens the run.
- Server: ``target_qps`` is the arrival rate the latency bound is judged at; the run holds
  ``max(min_query_count, min_duration * target_qps)`` queries, and early stopping needs several hundred of them
  to accept a 99th percentile.

When neither the command line nor a user.conf given with ``--user-conf`` states the value (the package's own
user.conf files are generic guesses), :func:`calibrate` measures it on samples loaded for the purpose, with the
run's own predictor instances (so under the thread settings the run uses), after a warm-up and before LoadGen
starts (so nothing of it is timed by LoadGen), and sets it with headroom. The timed pass lasts at least
:data:`MIN_ROUNDS` batches and a minimum wall time; the median of its second half is used (first calls pay for
lazy initialisation: TorchScript's profiling runs, allocator growth), and when the two halves disagree by more
than :data:`AGREEMENT` (a host whose load changed meanwhile) the pass is repeated, at most :data:`MAX_PASSES`
times. The rate or latency the run is expected to reach (the median plus the harness's per-sample costs) is
handed to the estimate printed before the run (:func:`mlharness.calibration.estimate.note_expected`). Server starts from the Offline-style measurement: the highest rate an ideal queue on the measured
batch times keeps within the latency bound (:mod:`mlharness.loadgen.queueing`), of which a conservative fraction is
used (``mlharness tune`` searches the highest VALID rate by trial runs).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.calibration import calibrate_dev, estimate, server_bound, server_probe
from mlharness.calibration.asked import Asked
from mlharness.calibration.stated import EXPECTED_KEYS, conf_states, count_given_by, given_by  # noqa: F401
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.pinning import pinned

# An Offline run reaches a share of the rate its batches reach timed one after another: the SUT's feeder cuts
# the query into batches meanwhile, and both need the GIL between two calls into the framework. On 2-core hosts
# that share was 0.45 to 0.9 (a few hundred us per batch: near 0.5; a busy host: higher), so the run is
# expected at OFFLINE_RUN_SHARE of the timed rate, less the harness's costs per batch and sample below.
OFFLINE_RUN_SHARE = 0.5
# target_qps = 1.75 x the expected rate, 1.05 x the timed rate: a run would have to beat its batches timed
# alone by 15% (LoadGen's 1.1 slack) to finish before min_duration; a run at the expected rate lasts about 1.9x
# min_duration (1.5 x the fast end of the timed batches made 2 s runs last 5 to 15 s, or end too early)
ESTIMATE_TOWARD_TIMED = 0.1  # where an Offline run's time is estimated between the expected and timed rates
OFFLINE_HEADROOM = 2.1
# runs under a minute are calibrated on half a second, which a busy host can slow 2-4x for its whole length: they
# ask for more samples (seconds more run) rather than end before min_duration
SHORT_OFFLINE_HEADROOM, SHORT_RUN_MS = 3.0, 60_000
LATENCY_HEADROOM = 0.5  # expected latency = 0.5 x the fast end: queries for 4x min_duration at that speed
# what LoadGen and the SUT add to an Offline run per batch (hand-offs between the SUT's threads) and per sample
# (completion, LoadGen's bookkeeping), and to each query of a stream run; the low end of what 2-core hosts showed
# (10-50 us per batch, 1.3-3 us per sample, 25-35 us per query): only models of a few us per sample notice them,
# and a run faster than expected risks INVALID where a slower one only runs longer
OFFLINE_BATCH_OVERHEAD_MS, OFFLINE_SAMPLE_OVERHEAD_MS, STREAM_QUERY_OVERHEAD_MS = 0.010, 0.0013, 0.025
SERVER_FRACTION = 0.35  # of the ideal-queue rate (the harness reaches about half of it on a busy CPU)
# harness costs added to the measured Server batch times: per batch (hand-offs, completion) and per query
# (LoadGen's issue callback into Python, queueing); they only matter for models of a few microseconds
SERVER_BATCH_OVERHEAD_MS, SERVER_QUERY_OVERHEAD_MS = 0.2, 0.05
EARLY_STOPPING_QUERIES = estimate.EARLY_STOPPING_QUERIES  # a Server run sized for early stopping asks this many
MAX_GENERATED_QUERIES = 2_000_000  # cap on the queries LoadGen pre-generates (memory), via the expected latency
FAST_PERCENTILE = 10  # the streams' generated queries are sized from the fast end of the timed queries
MIN_ROUNDS = 10  # measured queries/batches (per instance) at least, whatever the time budget
AGREEMENT = 1.5  # the medians of the pass's two halves must agree within this factor ...
MAX_PASSES = 3  # ... or the pass is repeated, at most this many times in all
MIN_BUDGET_S, MAX_BUDGET_S = 0.5, 3.0  # a pass's minimum wall time: 2% of min_duration within these


@dataclass
class Calibration:
    """How the expected performance of a run was calibrated (recorded in mlharness_run.json)."""

    scenario: str
    key: str  # user.conf key set: target_qps or target_latency
    value: float  # what was set (samples/s, or ms per query)
    measured: float  # samples/s (Offline: median batch time; Server: mean) or ms per query (median)
    headroom: float  # value = measured x headroom (Server: fraction of the ideal-queue rate)
    samples_measured: int
    queries_measured: int  # queries (SingleStream/MultiStream) or batches (Offline/Server) timed
    seconds: float  # wall time of the timed pass
    batch: int
    extra: dict[str, Any] = field(default_factory=dict)  # Server: ideal rate, batch times; raised min_query_count

    @property
    def unit(self) -> str:
        return "ms" if self.key == "target_latency" else "QPS"

    def conf_lines(self, model: str) -> list[str]:
        lines = [f"{model}.{self.scenario}.{self.key} = {_fmt(self.value)}"]
        if "min_query_count" in self.extra:
            lines.append(f"{model}.{self.scenario}.min_query_count = {self.extra['min_query_count']}")
        return lines

    def one_line(self) -> str:
        what = "expected latency" if self.key == "target_latency" else (
            "target QPS" if self.scenario == "Server" else "expected QPS")
        measured = (f"{self.measured:.4g} ms per query" if self.key == "target_latency"
                    else f"{self.measured:,.4g} samples/s")
        how = (f"{self.headroom:g} x the ideal-queue rate {self.extra.get('ideal_qps', 0):,.4g} QPS"
               + server_probe.describe(self.extra.get("probes", []), self.extra.get("latency_bound_ms", 0))
               if self.scenario == "Server" else f"headroom x{self.headroom:g}")
        if self.scenario == "Server" and not self.extra.get("ideal_qps"):  # say why no rate keeps the bound
            how = server_bound.no_rate_reason(self.extra)
        more = (f"; min_query_count raised to {self.extra['min_query_count']} for early stopping"
                if "min_query_count" in self.extra else "")
        if not self.extra.get("stable", True):
            more += f"; the timed passes disagreed (a busy host?): the last of {self.extra['passes']} is used"
        line = estimate.calibration_line(
            what, f"{_fmt(self.value)} {self.unit}", f"{measured} over {self.queries_measured} "
            f"{'queries' if self.key == 'target_latency' else 'batches'} of {self.samples_measured} loaded samples",
            how + more)
        if "long_run" in self.extra:
            line += f"\n{self.extra['long_run']}"
        return line

    def as_dict(self) -> dict[str, Any]:
        return {"calibrated": True, **asdict(self)}


def fmt_value(value: float) -> str:
    """A calibrated value as the written user.conf states it."""
    return f"{value:.6g}" if value < 1 else f"{value:.2f}"


_fmt = fmt_value


def budget_seconds(settings: Any) -> float:
    """A timed pass lasts at least 2% of min_duration, between 0.5 s and 3 s (and MIN_ROUNDS batches)."""
    return min(MAX_BUDGET_S, max(MIN_BUDGET_S, int(settings.min_duration_ms) / 1000.0 * 0.02))


def settled(times: list[float]) -> tuple[list[float], bool]:
    """The second half of a pass's times (the first pays for lazy initialisation), and whether the halves agree
    within AGREEMENT, in median and in mean (they do not when the first calls were slow, or when the host's
    load changed during the pass: the mean carries the stalls)."""
    half = len(times) // 2
    if half == 0:
        return list(times), True

    def agree(f: Any) -> bool:
        a, b = f(times[:half]), f(times[half:])
        return max(a, b) <= AGREEMENT * max(min(a, b), 1e-12)

    return times[half:], agree(statistics.median) and agree(statistics.fmean)


def calibrate(scenario: str, settings: Any, pipelines: list[Any], loader: Any, perf_count: int, batch: int,
              warmup: int = 1, budget_s: float | None = None, affinity: list[set[int]] | None = None,
              keep_count: bool = False) -> Calibration:
    """Measure on up to a few dozen samples loaded for the purpose (unloaded afterwards), set the expected
    performance in ``settings`` and return how (``keep_count``: the user stated min_query_count; never raised)."""
    budget = budget_seconds(settings) if budget_s is None else budget_s
    spq = int(settings.multi_stream_samples_per_query) if scenario == "MultiStream" else 1
    n = max(1, min(perf_count, max(2 * batch, 16, spq)))
    indices = list(range(n))
    progress, loader.on_progress = loader.on_progress, None
    loader.load(indices)
    try:
        for k, p in enumerate(pipelines):
            with pinned(affinity[k % len(affinity)] if affinity else None):
                p.warmup(np.asarray(indices[:batch], dtype=np.int64), max(1, warmup))
        if scenario in ("SingleStream", "MultiStream"):
            with pinned(affinity[0] if affinity else None):  # the cores the run's first runner gets
                cal = _latency(scenario, settings, pipelines[0], n, spq, batch, budget)
        else:
            cal = _throughput(scenario, settings, pipelines, n, batch, budget, affinity, keep_count)
    finally:
        loader.unload(indices)
        loader.on_progress = progress
    cal.value = float(_fmt(cal.value))  # exactly what the written user.conf says, so a rerun from it matches
    apply(cal, settings)
    if "expected_samples_per_second" in cal.extra:
        # runs reached 0.35 to 0.9 of the timed rate (a tiny PyTorch model the low end, the ONNX demo the high):
        # the time is estimated a tenth of the way (in log scale) from the expected rate, the low end used for
        # sizing, which made the demo's estimate 1.85x too long, toward the timed rate, whose midpoint made the
        # tiny PyTorch model's 1.7-1.9x too short (a quarter of the way still 1.54x on a quiet host)
        low = cal.extra["expected_samples_per_second"]
        estimate.note_expected(settings, low * (cal.measured / low) ** ESTIMATE_TOWARD_TIMED if low > 0 else low)
    elif "expected_ms_per_query" in cal.extra:
        estimate.note_expected(settings, 1000.0 / cal.extra["expected_ms_per_query"])
    return cal


def _latency(scenario: str, settings: Any, pipeline: Any, n: int, spq: int, batch: int,
             budget: float) -> Calibration:
    start = time.perf_counter()
    q, total, passes = 0, 0, 0
    stable = False
    while not stable and passes < MAX_PASSES:
        times: list[float] = []
        t_pass = time.perf_counter()
        while (time.perf_counter() - t_pass < budget or len(times) < MIN_ROUNDS) and len(times) < 100_000:
            idx = (np.arange(q * spq, (q + 1) * spq) % n).astype(np.int64)
            t0 = time.perf_counter()
            for b in range(0, spq, batch):  # as the SUT runs a query: in batches of at most max_batchsize
                pipeline.run(idx[b:b + batch])
            times.append(time.perf_counter() - t0)
            q += 1
        total, passes = total + len(times), passes + 1
        kept, stable = settled(times)
    median_ms = statistics.median(kept) * 1000.0
    # LoadGen's value from the fast end: more generated queries only cost memory, too few make the run INVALID
    fast_ms = fast_quantile(kept) * 1000.0
    floor_ms = 2.0 * int(settings.min_duration_ms) / MAX_GENERATED_QUERIES
    value = max(LATENCY_HEADROOM * fast_ms, floor_ms, 1e-3)
    return Calibration(scenario, "target_latency", value, median_ms, LATENCY_HEADROOM, n, total,
                       time.perf_counter() - start, batch,
                       {"median_ms": median_ms, "fast_ms": fast_ms, "stable": stable, "passes": passes,
                        "expected_ms_per_query": statistics.fmean(kept) * 1000.0 + STREAM_QUERY_OVERHEAD_MS})


def fast_quantile(times: list[float]) -> float:
    """The 10th percentile: a busy host only ever slows a pass down, so the fast end is the model's own speed
    (sizing LoadGen for a faster system than measured is the safe side for Offline and the streams)."""
    return float(np.percentile(np.asarray(times), FAST_PERCENTILE))


@dataclass
class Timed:
    """Batches of one size timed on every instance side by side (the last pass, repeated while its halves
    disagreed): mean samples/s, samples/s at the median batch time of the settled half, samples/s over the
    settled half (its stalls included: a run meets them too), and what it took."""

    mean_sps: float
    median_sps: float
    settled_sps: float
    batches: int
    seconds: float
    stable: bool
    passes: int


def _batches_per_second(pipelines: list[Any], n: int, size: int, budget: float,
                        affinity: list[set[int]] | None = None) -> Timed:
    batches = passes = 0
    stable = False
    start = time.perf_counter()
    while not stable and passes < MAX_PASSES:
        sps, count, _, times = _one_pass(pipelines, n, size, budget, affinity)
        batches, passes = batches + count, passes + 1
        halves = [settled(t) for t in times]
        stable = all(ok for _, ok in halves)
    median = sum(size / max(statistics.median(kept), 1e-9) for kept, _ in halves)
    over = sum(size * len(kept) / max(sum(kept), 1e-9) for kept, _ in halves)
    return Timed(sps, median, over, batches, time.perf_counter() - start, stable, passes)


def _one_pass(pipelines: list[Any], n: int, size: int, budget: float,
              affinity: list[set[int]] | None = None) -> tuple[float, int, float, list[list[float]]]:
    """(samples/s, batches, seconds, each instance's batch times) of one pass."""
    counts = [0] * len(pipelines)
    times: list[list[float]] = [[] for _ in pipelines]
    errors: list[BaseException] = []
    start = time.perf_counter()

    def loop(k: int) -> None:
        try:  # each instance on the cores its runner gets in the run (--pin-cores)
            with pinned(affinity[k % len(affinity)] if affinity else None):
                b = 0
                while time.perf_counter() - start < budget or counts[k] < MIN_ROUNDS:
                    t0 = time.perf_counter()
                    pipelines[k].run((np.arange(b * size, (b + 1) * size) % n).astype(np.int64))
                    times[k].append(time.perf_counter() - t0)
                    counts[k] += 1
                    b += 1
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(1, len(pipelines))]
    for t in threads:
        t.start()
    loop(0)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    seconds = time.perf_counter() - start
    return sum(counts) * size / seconds, sum(counts), seconds, times


def _throughput(scenario: str, settings: Any, pipelines: list[Any], n: int, batch: int,
                budget: float, affinity: list[set[int]] | None = None, keep_count: bool = False) -> Calibration:
    size = min(batch, n)
    main = _batches_per_second(pipelines, n, size, budget if scenario == "Offline" else budget / 2, affinity)
    checks = {"stable": main.stable, "passes": main.passes}
    if scenario == "Offline":
        # the run's rate: its share of the settled half's throughput (a busy host's stalls included, the first
        # calls' costs left out) with what LoadGen and the SUT spend on each batch and sample
        harness_s = (OFFLINE_BATCH_OVERHEAD_MS / size + OFFLINE_SAMPLE_OVERHEAD_MS) / 1000.0
        expected = 1.0 / (1.0 / max(OFFLINE_RUN_SHARE * main.settled_sps, 1e-9) + harness_s)
        room = OFFLINE_HEADROOM if int(settings.min_duration_ms) >= SHORT_RUN_MS else SHORT_OFFLINE_HEADROOM
        return Calibration(scenario, "target_qps", room * expected, main.median_sps, room,
                           n, main.batches, main.seconds, batch,
                           {"mean_samples_per_second": main.mean_sps, "settled_samples_per_second": main.settled_sps,
                            "expected_samples_per_second": expected, **checks})
    from mlharness.loadgen.queueing import server_ceiling

    # Server is judged on its latency tail: the mean batch times (noise included), not the median
    sps = main.mean_sps
    one = _batches_per_second(pipelines[:1], n, 1, budget / 2, affinity)
    checks = {"stable": main.stable and one.stable, "passes": max(main.passes, one.passes)}
    batch_ms = {1: 1000.0 / one.mean_sps + SERVER_BATCH_OVERHEAD_MS + SERVER_QUERY_OVERHEAD_MS}
    if size > 1:
        batch_ms[size] = (1000.0 * size * len(pipelines) / sps + SERVER_BATCH_OVERHEAD_MS
                          + size * SERVER_QUERY_OVERHEAD_MS)
    bound_ms = int(settings.server_target_latency_ns) / 1e6
    ideal = server_ceiling(batch_ms, bound_ms, size, len(pipelines), percentile=99.5, queries=4000, steps=14)
    # no rate keeps the bound (one batch alone is too slow): a trickle, and the run explains the INVALID
    qps = SERVER_FRACTION * ideal if ideal > 0 else max(0.1, 0.1 * one.mean_sps)
    # the rate against the host as it is: wake-ups that wait for a core, the framework's own threads
    probes = server_probe.probe_rate(server_probe.one_sample_runner(pipelines[0]), n, qps, bound_ms) if ideal else []
    qps = server_probe.rate_after(probes, qps)
    cal = Calibration(scenario, "target_qps", qps, sps, SERVER_FRACTION, n, main.batches + one.batches,
                      main.seconds + one.seconds, batch,
                      {"ideal_qps": ideal, "batch_ms": batch_ms, "latency_bound_ms": bound_ms, **checks,
                       "probes": [p.as_dict() for p in probes]})
    needed = EARLY_STOPPING_QUERIES
    # more queries for early stopping only help a rate that can meet the bound: with none, the run is INVALID
    # whatever its length, and a trickle of 700 queries would last for many minutes
    if not keep_count and ideal > 0 and int(settings.min_query_count) < needed and qps * int(settings.min_duration_ms) / 1000.0 < needed:
        cal.extra["min_query_count"] = needed
    long_run = estimate.long_server_plan(qps, int(cal.extra.get("min_query_count", settings.min_query_count)),
                                         int(settings.min_duration_ms), ideal, bound_ms, "min_query_count" in cal.extra)
    if long_run:
        cal.extra["long_run"] = long_run
    return cal


def apply(cal: Calibration, settings: Any) -> None:
    if cal.scenario == "Offline":
        settings.offline_expected_qps = cal.value
    elif cal.scenario == "Server":
        settings.server_target_qps = cal.value
        if "min_query_count" in cal.extra:
            settings.min_query_count = int(cal.extra["min_query_count"])
    elif cal.scenario == "SingleStream":  # LoadGen holds it as a double: the same ns as the user.conf line gives
        settings.single_stream_expected_latency_ns = cal.value * 1e6
    else:
        settings.multi_stream_expected_latency_ns = cal.value * 1e6


def effective_conf(base: Path | None, model: str, scenario: str, overrides: dict[str, Any],
                   cal: Calibration | None) -> str:
    """The user.conf a run effectively used: the file, the command line's overrides, the calibrated lines."""
    text = lgs.effective_user_conf(base, model, scenario, overrides)
    if cal is not None:
        text += ("\n# Expected performance calibrated by mlharness on this system "
                 f"(measured {cal.measured:.6g} {'ms per query' if cal.unit == 'ms' else 'samples/s'}):\n"
                 + "\n".join(cal.conf_lines(model)) + "\n")
    return text


def for_run(asked: Asked, plan: lgs.SettingsPlan, settings: Any, pipelines: list[Any], loader: Any, perf_count: int,
            batch: int, warmup: int, outdir: Path, affinity: list[set[int]] | None = None) -> dict[str, Any]:
    """The runner's step: calibrate when the run needs it, say so, write the effective user.conf beside the
    logs; returns what goes into the run metadata under 'calibration'. A Server run whose stated min_query_count
    is too small for early stopping says so (calibrate_dev.short_count_note); an Offline development run is sized
    from the expected rate, not the dataset (calibrate_dev.size)."""
    result = _for_run(asked, plan, settings, pipelines, loader, perf_count, batch, warmup, outdir, affinity)
    return calibrate_dev.tell(result, asked, plan, settings, perf_count, floor=batch,
                              sizing=plan.scenario == "Offline")


def _for_run(asked: Asked, plan: lgs.SettingsPlan, settings: Any, pipelines: list[Any], loader: Any, perf_count: int,
             batch: int, warmup: int, outdir: Path, affinity: list[set[int]] | None) -> dict[str, Any]:
    if plan.mode != "performance":
        return {"calibrated": False, "reason": "accuracy mode"}
    if not asked.calibrate:
        return {"calibrated": False, "reason": "--no-calibrate"}
    if asked.network == "lon":
        return {"calibrated": False, "reason": "LoadGen over the network: the agents run the model"}
    source = given_by(plan.scenario, plan.model, plan.overrides, asked.user_conf)
    if source is not None:
        return {"calibrated": False, "reason": f"expected performance given by {source}"}
    stated = count_given_by(plan, asked.user_conf)
    cal = calibrate(plan.scenario, settings, pipelines, loader, perf_count, batch, warmup, affinity=affinity,
                    keep_count=stated is not None)
    asked.tell(cal.one_line())
    (outdir / "user.conf").write_text(effective_conf(plan.user_conf, plan.model, plan.scenario,
                                                     plan.overrides.given(), cal))
    return cal.as_dict()


__all__ = ["Calibration", "EXPECTED_KEYS", "apply", "calibrate", "conf_states", "count_given_by", "effective_conf",
           "fmt_value", "for_run", "given_by"]
