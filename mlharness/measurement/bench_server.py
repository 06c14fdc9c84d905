"""The Server part of ``mlharness bench overhead``: the ideal-queue ceiling, the search for the highest VALID rate,
and each trial set against the same trial through the zero-overhead queue."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RATIO_MAX_QUERIES = 5_000  # the harness's Server cost is turned into a ceiling ratio on at most this many arrivals


def ideal_ceilings(batch_ms: dict[int, float], bound_ms: float, server_batch: int,
                   percentile: float, only: str | None = None) -> dict[str, float]:
    """The ideal-queue Server ceiling (:func:`mlharness.loadgen.queueing.server_ceiling`) of greedy batching capped at
    each measured batch size, and of the harness's own policy (:mod:`mlharness.loadgen.server_queue`) on the
    same batch times; the best of them is the ceiling the harness is held to."""
    from mlharness.loadgen.queueing import server_ceiling
    from mlharness.loadgen.server_queue import BatchPolicy

    caps = sorted({k for k in batch_ms if k <= server_batch} | {server_batch})
    out = {f"greedy up to {k}": server_ceiling(batch_ms, bound_ms, max_batch=k, percentile=percentile)
           for k in caps if only in (None, f"greedy up to {k}")}
    if only in (None, "mlharness policy"):
        policy = BatchPolicy(server_batch, 1, batch_ms)
        out["mlharness policy"] = server_ceiling(batch_ms, bound_ms, max_batch=server_batch,
                                                 percentile=percentile, take=policy.take)
    return out


def read_trial(run_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a traced Server run's trace says about it, read once: the arrival times (ms) of its queries (the
    ``issue`` marks, sorted), and its ``predict`` spans in the order they started (samples per batch, ms)."""
    from mlharness.telemetry.breakdown import load_events

    spans = [e for e in load_events(run_dir / "mlharness_trace.json") if e.get("ph") == "X"]
    arrivals = np.sort([e["ts"] / 1e3 for e in spans if e.get("name") == "issue"])
    predicts = sorted((e for e in spans if e.get("name") == "predict"), key=lambda e: e["ts"])
    return (arrivals, np.array([e.get("args", {}).get("samples", 1) for e in predicts], dtype=np.int64),
            np.array([e["dur"] / 1e3 for e in predicts], dtype=np.float64))


def same_trial_ideal(arrivals: np.ndarray, sizes: np.ndarray, predict_ms: np.ndarray, batch_ms: dict[int, float],
                     bound_ms: float, server_batch: int, harness_p99_ms: float) -> dict[str, float]:
    """The zero-overhead queue on one trial's own arrivals with the model exactly as fast as it was in that trial:
    each batch takes its own measured predict time (the batch times, scaled to the trial's median speed, times
    each batch's factor). Whatever separates LoadGen's p99 from this queue's p99 is the harness; the machine's
    speed, which drifts by ±10% over minutes on a shared VM, is the same on both sides.

    Returns the queue's p99 and late count at the trial's rate, the harness's p99 cost over it, and that cost as
    a ceiling ratio: the highest rate at which the ideal queue (on this schedule, median batch times) meets the
    bound less that cost, over the highest at which it meets the bound."""
    from mlharness.loadgen.queueing import batch_time_fn, early_stopping_late, replay_ceiling, serve
    from mlharness.loadgen.server_queue import BatchPolicy

    one = float(np.median(predict_ms[sizes == 1])) if np.any(sizes == 1) else None
    measured = batch_time_fn(batch_ms)
    scale = one / batch_ms[1] if one else float(np.median(predict_ms / [measured(int(k)) for k in sizes]))
    times = {k: v * scale for k, v in batch_ms.items()}
    cost = batch_time_fn(times)
    factors = predict_ms / np.array([cost(int(k)) for k in sizes]) if len(sizes) else None
    take = BatchPolicy(server_batch, 1, batch_ms).take
    lat = serve(np.asarray(arrivals) - float(np.min(arrivals)), times, server_batch, 1, take, factors)
    ideal_p99 = float(np.sort(lat)[int(len(lat) * 0.99)])  # LoadGen's p99: the sorted latency at index n x 0.99
    extra = max(0.0, harness_p99_ms - ideal_p99)
    head = np.sort(arrivals)[:RATIO_MAX_QUERIES]  # a fast model's one-second trial has 100,000s of queries
    late = early_stopping_late(len(head))
    full = replay_ceiling(head, times, bound_ms, late, server_batch, take)
    less = replay_ceiling(head, times, bound_ms - extra, late, server_batch, take)
    return {"ideal_p99_ms": ideal_p99, "ideal_late": int(np.count_nonzero(lat > bound_ms)),
            "late_allowed": early_stopping_late(len(arrivals)),
            "harness_p99_cost_ms": harness_p99_ms - ideal_p99, "cost_as_ceiling_ratio": less / full if full else 0.0}


def server_search(cfg: Any, run_trial: Callable[[int, float, float, int], Any], offline_sps: float,
                  bound_ms: float, batch_ms: dict[int, float], server_batch: int,
                  bare_probe: Callable[[], np.ndarray]) -> dict[str, Any]:
    """Highest VALID Server QPS with p99 <= bound, by bisection below the ideal ceiling (``run_trial(step, qps,
    bound_ms, queries)`` runs one traced trial and returns its :class:`~mlharness.run.runner.RunResult`; ``cfg``
    is the :class:`~mlharness.measurement.bench.BenchConfig`); and what the harness
    costs in each trial against the same trial through the zero-overhead queue (:func:`same_trial_ideal`).

    The ceiling is what a harness with no overhead could reach with the same batching on this machine (see
    :mod:`mlharness.loadgen.queueing`), for the percentile early stopping demands of a trial this long: no trial can
    be VALID above it (and real service times vary, so not at it either): the search bisects between 30% of
    it and it. A shared VM's speed drifts by ±10% over minutes, which moves the highest VALID rate more than the
    harness does; so each trial is also compared with the ideal queue on its own arrivals and its own predict
    times, and the bare model is timed just before it (``bare_probe``) to show whether the model was slower
    inside the harness than alone."""
    from mlharness.loadgen.queueing import early_stopping_percentile

    # LoadGen's early stopping lets a short run have far fewer than 1% of its samples late: trials of ~1,500
    # queries must meet about p99.6 (--quick: one trial of ~600 queries, none of them late). The ceiling for that
    # percentile is the one a trial can reach; the p99 ceiling is what an endless run could.
    queries = cfg.server_queries or (600 if cfg.quick else 1500)
    # a run that may have no late sample at all must keep its n samples below the (1 - 1/n) quantile
    pct = min(early_stopping_percentile(queries) or 100.0, 100.0 * (1 - 1 / queries))
    cfg.say("Server ceiling: simulating the ideal queue on the measured batch times")
    ceilings = ideal_ceilings(batch_ms, bound_ms, server_batch, pct)
    best_queue = max(ceilings, key=ceilings.__getitem__)
    ceiling = ceilings[best_queue]
    ceiling_p99 = ideal_ceilings(batch_ms, bound_ms, server_batch, 99.0, only=best_queue)[best_queue]
    out: dict[str, Any] = {"server_p99_bound_ms": bound_ms, "server_batch_ms": batch_ms,
                           "server_ideal_qps": ceiling_p99,
                           "server_ideal_ratio": ceiling_p99 / offline_sps if offline_sps else 0.0,
                           "server_trial_queries": queries, "server_trial_percentile": pct,
                           "server_ideal_qps_at_trial_length": ceiling, "server_ideal_queues": ceilings,
                           "server_ideal_best_queue": best_queue}
    lo, hi = 0.3 * ceiling, ceiling
    best = 0.0
    tried = []
    steps = cfg.server_search_steps if ceiling > 0 else 0
    for step in range(steps):
        qps = 0.5 * ceiling if steps == 1 else (lo + hi) / 2  # one trial: where a real queue usually passes
        bare_ms = float(np.median(bare_probe())) / 1e6
        cfg.say(f"Server trial {step + 1}/{steps}: {qps:.1f} QPS ({qps / ceiling:.2f} of the ceiling for such a "
                f"run), p99 bound {bound_ms:.1f} ms; bare batch 1 just before: {bare_ms:.2f} ms")
        res = run_trial(step, qps, bound_ms, queries)  # a traced Server run (``--trace model``)
        p99 = float(res.summary.fields.get("99.00 percentile latency (ns)") or 0) / 1e6
        arrivals, sizes, predict_ms = read_trial(res.output)
        trial = {"qps": qps, "valid": res.summary.valid, "p99_ms": p99, "bare_ms": bare_ms,
                 "predict_ms": float(np.median(predict_ms[sizes == 1])) if np.any(sizes == 1) else None}
        if len(sizes) and p99:
            trial.update(same_trial_ideal(arrivals, sizes, predict_ms, batch_ms, bound_ms, server_batch, p99))
            trial["ideal_valid"] = trial["ideal_late"] <= trial["late_allowed"]
        tried.append(trial)
        if res.summary.valid:
            best = max(best, qps)
            lo = qps
        else:
            hi = qps
    out.update(server_best_valid_qps=best, server_ratio=best / offline_sps if offline_sps else 0.0,
               server_of_ideal=best / ceiling if ceiling else 0.0, server_tried=tried)
    costs = [t for t in tried if "harness_p99_cost_ms" in t]
    if costs:
        out.update(server_p99_cost_ms=statistics.median(t["harness_p99_cost_ms"] for t in costs),
                   server_cost_as_ceiling_ratio=statistics.median(t["cost_as_ceiling_ratio"] for t in costs),
                   server_verdicts_as_ideal=sum(t["valid"] == t["ideal_valid"] for t in costs))
    return out


__all__ = ["ideal_ceilings", "read_trial", "same_trial_ideal", "server_search"]
