"""A Server rate checked against the host as it is: a short paced trial of the real pipeline.

The ideal-queue rate (:mod:`mlharness.loadgen.queueing`) knows the model's batch times timed back to back. A Server run
meets more than that: each arrival wakes a thread, and on a busy host (another process on a core, a framework's
own thread pools) a wake-up can wait several milliseconds for a core. Against a bound of a few milliseconds those
stalls, not the model, decide the 99th percentile. The probe sends single samples through the run's own pipeline
at Poisson arrival times of the planned rate for a moment and measures each one from its scheduled arrival to
its completion (the waits for a core and for earlier samples included). While that p99 takes more than
:data:`BOUND_SHARE` of the bound, the rate is halved and probed again, at most :data:`MAX_PROBES` times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

BOUND_SHARE = 0.5  # a probed p99 above this share of the bound: the run's own would likely exceed it
MAX_PROBES = 4
MIN_SAMPLES = 200  # a probe sends at least this many samples (fewer say nothing of a 99th percentile) ...
MIN_SECONDS, MAX_SECONDS = 0.5, 2.0  # ... and lasts at least this long, at most this long
SEED = 20260


@dataclass
class Probe:
    qps: float
    samples: int
    p99_ms: float
    ok: bool

    def as_dict(self) -> dict[str, Any]:
        return {"qps": round(self.qps, 4), "samples": self.samples, "p99_ms": round(self.p99_ms, 4), "ok": self.ok}


def paced_latencies_ms(run_one: Any, n: int, qps: float, seconds: float, seed: int = SEED) -> np.ndarray:
    """Milliseconds from each scheduled Poisson arrival (rate ``qps``, over ``seconds``) to the completion of
    ``run_one(index)`` for it, one sample at a time in arrival order (indices cycle over ``n`` loaded samples)."""
    rng = np.random.default_rng(seed)
    count = max(1, int(qps * seconds))
    arrivals = np.cumsum(rng.exponential(1.0 / qps, size=count))
    out = np.empty(count)
    start = time.perf_counter()
    for i, at in enumerate(arrivals):
        wait = start + at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        run_one(i % n)
        out[i] = time.perf_counter() - (start + at)
    return 1e3 * out


def probe_rate(run_one: Any, n: int, qps: float, bound_ms: float) -> list[Probe]:
    """Probe ``qps``, halving it while the probed p99 exceeds BOUND_SHARE of ``bound_ms``; the last probe holds
    the rate to use. A rate too slow to send MIN_SAMPLES within MAX_SECONDS is not probed (empty list): its gaps
    are long against any stall."""
    probes: list[Probe] = []
    while len(probes) < MAX_PROBES:
        seconds = max(MIN_SECONDS, MIN_SAMPLES / qps)
        if seconds > MAX_SECONDS:
            break
        lat = paced_latencies_ms(run_one, n, qps, seconds, SEED + len(probes))
        p99 = float(np.percentile(lat, 99))
        probes.append(Probe(qps, len(lat), p99, p99 <= BOUND_SHARE * bound_ms))
        if probes[-1].ok:
            break
        qps /= 2
    return probes


def one_sample_runner(pipeline: Any) -> Any:
    """``run_one(index)``: one sample through the pipeline as a Server query goes (gather, model, respond)."""
    def run_one(i: int) -> None:
        idx = np.asarray([i], dtype=np.int64)
        pipeline.respond(pipeline.infer(pipeline.store.gather(idx)), 1, idx)

    return run_one


def rate_after(probes: list[Probe], planned: float) -> float:
    """The rate to run at: the last probe's when it kept the bound, else half of it (none probed: as planned)."""
    if not probes:
        return planned
    return probes[-1].qps if probes[-1].ok else probes[-1].qps / 2


def describe(probes: list[dict[str, Any]], bound_ms: float) -> str:
    """The calibration line's words for probes that lowered the rate (nothing when the first one kept it)."""
    if not probes or (len(probes) == 1 and probes[0]["ok"]):
        return ""
    steps = ", ".join(f"{p['qps']:,.4g} QPS gave p99 {p['p99_ms']:.3g} ms" for p in probes)
    return (f", lowered by paced trials of single samples on this host ({steps}; each held to "
            f"{BOUND_SHARE:g} x the {bound_ms:g} ms bound)")
