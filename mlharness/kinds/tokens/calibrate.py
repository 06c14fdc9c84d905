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
from mlharness.kinds.tokens.trials import (
    LIMIT_MARGIN,
    SUT_SAMPLE_OVERHEAD_MS,
    offline_bursts,
    probed,
    single_request,
    timed_burst,
    timed_rounds,
    worst,
)
from mlharness.loadgen import settings as lgs
from mlharness.predictors.generative import GenerativePredictor

# an end-to-end bound (seconds, qwen3-vl-235b-a22b's 12 s) leaves a queue room a TTFT bound does not: the
# planned rate is half the burst rate (0.7 left runs INVALID when a busy host slowed the model mid-run), and the
# paced trials still halve it while the slowest request breaks LIMIT_MARGIN of the bound
END_TO_END_FRACTION = 0.5
MIN_SAMPLES = 16  # samples loaded for the measurement (fewer when the performance set is smaller)
# the Offline target over the measured token rate: token models keep the headroom their calibration was measured
# with (the image models' busy-host calibration in calibrate.py uses its own)
OFFLINE_HEADROOM = 1.5


def measure(scenario: str, settings: Any, predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
            budget: float, keep_count: bool = False) -> Calibration:
    """The calibration of a LoadGen ``scenario`` (Interactive is 'Server') from generations of ``prompts``
    (``keep_count``: the user stated min_query_count, which is never raised)."""
    start = time.perf_counter()
    n = len(prompts)
    if scenario in ("SingleStream", "MultiStream"):
        seconds, _ = timed_rounds(predictors[:1], prompts[:1], budget)
        fast_ms = fast_quantile(seconds) * 1000.0
        floor_ms = 2.0 * int(settings.min_duration_ms) / MAX_GENERATED_QUERIES
        return Calibration(scenario, "target_latency", max(LATENCY_HEADROOM * fast_ms, floor_ms, 1e-3), fast_ms,
                           LATENCY_HEADROOM, 1, len(seconds), time.perf_counter() - start, 1,
                           {"median_ms": float(np.median(seconds)) * 1000.0, "token_streams": True})
    if scenario == "Offline":
        # one LoadGen query for all samples; each still costs the SUT its first token and completion (without that
        # cost a grown burst rated a fake server 3-5x what its run reached)
        seconds, rounds, n = offline_bursts(predictors, prompts, budget)
        sps = n / fast_quantile(seconds)
        return Calibration(scenario, "target_qps", OFFLINE_HEADROOM * sps, sps, OFFLINE_HEADROOM, n, rounds,
                           time.perf_counter() - start, n, {"token_streams": True})
    return _server(settings, predictors, prompts, budget, start, keep_count)


def _server(settings: Any, predictors: list[GenerativePredictor], prompts: list[tuple[int, np.ndarray]],
            budget: float, start: float, keep_count: bool = False) -> Calibration:
    # token latencies off (qwen3-vl-235b-a22b): LoadGen bounds each request end to end by target_latency
    end_to_end = not bool(getattr(settings, "use_token_latencies", True))
    if end_to_end:
        ttft_limit, tpot_limit = int(settings.server_target_latency_ns) / 1e6, float("inf")
    else:
        ttft_limit, tpot_limit = int(settings.ttft_latency) / 1e6, int(settings.tpot_latency) / 1e6
    _, alone = timed_rounds(predictors[:1], prompts[:1], budget / 4)
    one_ttft = float(np.median([t.total_ms if end_to_end else t.ttft_ms for t in alone]))
    one_tpot = 0.0 if end_to_end else float(np.median([t.tpot_ms for t in alone]))
    extra: dict[str, Any] = {"token_streams": True, "ttft_limit_ms": ttft_limit,
                             "tpot_limit_ms": None if end_to_end else tpot_limit,
                             "alone_ttft_ms": one_ttft, "alone_tpot_ms": one_tpot, "end_to_end": end_to_end}
    rounds = len(alone)
    if one_ttft > ttft_limit or one_tpot > tpot_limit:
        # no rate keeps the limits: a trickle, and the run explains the INVALID
        one_sps = 1000.0 / max(t.ttft_ms + t.tpot_ms * max(t.tokens - 1, 0) for t in alone)
        qps, sps, k = max(0.1, 0.1 * one_sps), one_sps, 1
    else:
        k = len(prompts)
        while True:
            seconds, timings = timed_rounds(predictors, prompts[:k], budget / 2)
            rounds += len(seconds)
            worst_ttft, worst_tpot = worst(timings, end_to_end)
            if k == 1 or (worst_ttft <= LIMIT_MARGIN * ttft_limit and worst_tpot <= LIMIT_MARGIN * tpot_limit):
                break
            k //= 2
        sps = k / fast_quantile(seconds)
        qps = (END_TO_END_FRACTION if end_to_end else SERVER_FRACTION) * sps
        extra.update(concurrency=k, burst_ttft_ms=worst_ttft, burst_tpot_ms=worst_tpot)
        qps, extra["probes"] = probed(predictors, prompts, qps, ttft_limit, tpot_limit, end_to_end)
    cal = Calibration("Server", "target_qps", qps, sps, END_TO_END_FRACTION if end_to_end else SERVER_FRACTION,
                      len(prompts), rounds,
                      time.perf_counter() - start, k, extra)
    min_s = int(settings.min_duration_ms) / 1000.0
    meets = "concurrency" in extra  # a trickle is INVALID whatever its length: more queries would not help
    if not keep_count and meets and int(settings.min_query_count) < EARLY_STOPPING_QUERIES and \
            qps * min_s < EARLY_STOPPING_QUERIES:
        cal.extra["min_query_count"] = EARLY_STOPPING_QUERIES
    long_run = estimate.long_server_plan(qps, int(cal.extra.get("min_query_count", settings.min_query_count)),
                                         int(settings.min_duration_ms), qps if meets else 0.0,
                                         min(ttft_limit, tpot_limit), "min_query_count" in cal.extra,
                                         "--user-conf line '<model>.Server.target_latency = N'" if end_to_end
                                         else "--user-conf lines '<model>.Server.ttft_latency/tpot_latency = N'")
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
            timed_burst(predictors, prompts[:len(predictors)])
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
        if e.get("end_to_end"):
            timing = (f"{cal.measured:,.4g} samples/s with {cal.batch} generation(s) at once, the slowest "
                      f"{e.get('burst_ttft_ms', e['alone_ttft_ms']):.4g} ms end to end against the bound "
                      f"{e['ttft_limit_ms']:g} ms")
        else:
            timing = (f"{cal.measured:,.4g} samples/s with {cal.batch} generation(s) at once, TTFT "
                      f"{e.get('burst_ttft_ms', e['alone_ttft_ms']):.4g} ms and TPOT "
                      f"{e.get('burst_tpot_ms', e['alone_tpot_ms']):.4g} ms against the limits "
                      f"{e['ttft_limit_ms']:g}/{e['tpot_limit_ms']:g} ms")
        how = f"{cal.headroom:g} x the measured rate"
        if "min_query_count" in e:
            how += f"; min_query_count raised to {e['min_query_count']} for early stopping"
        if len(e.get("probes", [])) > 1:
            how += "; lowered by paced trials (" + ", ".join(
                (f"{p['qps']:.4g} QPS gave requests of at most {p['ttft_max_ms']:.4g} ms" if e.get("end_to_end") else
                 f"{p['qps']:.4g} QPS gave TTFT/TPOT at most {p['ttft_max_ms']:.4g}/{p['tpot_max_ms']:.4g} ms")
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
    return calibrate_dev.tell(result, asked, plan, settings, perf_count, floor=MIN_SAMPLES)


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
