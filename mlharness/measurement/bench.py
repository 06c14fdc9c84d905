"""Harness overhead, measured against the bare framework and LoadGen's own floor, in one invocation.

Bare and harness runs alternate (bare, harness, bare, harness, ...) so a machine that speeds up or slows down
during the benchmark affects both sides alike; medians are reported.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import parse_summary
from mlharness.measurement.bench_server import server_search
from mlharness.measurement.direct import DirectModel
from mlharness.run.runner import RunOptions, RunResult, run

ADJACENT_BARE_S = 3.0  # bare batch-1 timing before each Server trial: the machine's speed at that time

NULL_MANIFEST = """\
name: null-model
description: identity on tiny tensors, to measure the harness itself
framework: {name: echo, warmup: 0}
inputs: [{name: x, element_type: float32, shape: [4]}]
outputs: [{name: y, element_type: float32, shape: [4]}]
batching: {max_batchsize: 1, Offline: 64, Server: 16}
dataset:
  name: zeros
  init: |
    def init(count):
        return 1024
preprocess: |
  import numpy as np
  ZERO = np.zeros(4, dtype=np.float32)
  def preprocess(ctx, index):
      return ZERO
"""


@dataclass
class BenchConfig:
    manifest: str = "resnet50-random"
    dataset_path: str | None = None
    count: int = 64
    rounds: int = 3
    seconds: float = 5.0
    threads: int | None = None
    server_search_steps: int = 4
    server_bound_ms: float | None = None  # Server latency bound (default: 6 x the bare batch-1 p90)
    server_queries: int | None = None  # queries per Server trial (default: 1,500; --quick: 600)
    quick: bool = False
    progress: Callable[[str], None] | None = None

    def say(self, text: str) -> None:
        if self.progress:
            self.progress(text)


def _run(cfg: BenchConfig, manifest: str, scenario: str, out: Path, dataset_path: str | None = None,
         trace: str = "none", **overrides: Any) -> RunResult:
    return run(RunOptions(scenario=scenario, mode="performance", manifest=manifest, dataset_path=dataset_path,
                          output=out, count=cfg.count, threads=cfg.threads, trace=trace,
                          overrides=lgs.Overrides(**overrides)))


def loadgen_floor(scenario: str, seconds: float, out: Path) -> dict[str, float]:
    """LoadGen with a SUT that completes every sample inside issue_cb: the cost of LoadGen itself."""
    import mlperf_loadgen as lg

    buf = np.zeros(4, np.uint8)
    base = buf.ctypes.data

    def issue(ids: list[int], _indices: list[int]) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(i, base, 4) for i in ids])

    sut = lg.ConstructFastSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(1024, 1024, lambda _i: None, lambda _i: None)
    s = lg.TestSettings()
    s.FromConfig("", "null-model", scenario, 0)
    s.scenario = getattr(lg.TestScenario, scenario)
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms = int(seconds * 1000)
    s.min_query_count = 1
    s.offline_expected_qps = 3_000_000
    s.single_stream_expected_latency_ns = 5_000
    ls = lg.LogSettings()
    out.mkdir(parents=True, exist_ok=True)
    ls.log_output.outdir = str(out)
    ls.enable_trace = False
    try:
        lg.StartTestWithLogSettings(sut, qsl, s, ls, str(out / "no-audit.config"))
    finally:
        lg.DestroyFastSUT(sut)
        lg.DestroyQSL(qsl)
    fields = parse_summary(out / "mlperf_log_summary.txt", scenario).fields
    if scenario == "Offline":
        return {"sps": float(fields["Samples per second"])}
    return {"p90_ns": float(fields["90.0th percentile latency (ns)"]), "p50_ns": float(fields["50.00 percentile latency (ns)"])}


def bare_offline(session: DirectModel, n: int, batch: int, seconds: float) -> float:
    """Samples/s of the framework alone on contiguous pre-processed batches (no LoadGen, no queue)."""
    batches = [session.batch(np.arange(s, min(n, s + batch))) for s in range(0, n, batch)]
    predict = session.predictor.predict
    predict(batches[0])
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for b in batches:
            predict(b)
            done += len(b[0])
    return done / (time.perf_counter() - start)


def _timed_calls(predict: Callable[[Any], Any], inputs: list[Any], seconds: float, min_count: int) -> np.ndarray:
    """Nanoseconds of each ``predict`` call, cycling through ``inputs``, for ``seconds`` and at least
    ``min_count`` calls (after one untimed call)."""
    predict(inputs[0])
    lat = []
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < seconds or len(lat) < min_count:
        t = time.perf_counter_ns()
        predict(inputs[i % len(inputs)])
        lat.append(time.perf_counter_ns() - t)
        i += 1
    return np.array(lat, dtype=np.float64)


def bare_latencies(session: DirectModel, n: int, seconds: float, min_count: int = 32) -> np.ndarray:
    """Batch-1 latencies (ns) of the framework alone, one sample after another, for ``seconds`` and at least
    ``min_count`` samples."""
    samples = [session.batch(np.array([i])) for i in range(n)]
    return _timed_calls(session.predictor.predict, samples, seconds, min_count)


def bare_batch_ms(session: DirectModel, n: int, sizes: list[int], seconds: float) -> dict[int, float]:
    """Median milliseconds per batch of the framework alone, for each batch size (the Server's cost model)."""
    return {b: float(np.median(_timed_calls(session.predictor.predict, [session.batch(np.arange(b) % n)],
                                            seconds, 3))) / 1e6
            for b in sizes}


def _p90(lat_ns: np.ndarray) -> float:
    return float(np.percentile(lat_ns, 90))


def default_dataset(manifest: str, dataset_path: str | None, count: int) -> str | None:
    """``dataset_path``, or for the ResNet50 manifests a synthetic ImageNet of ``count`` images in the cache."""
    if dataset_path is not None or not manifest.startswith("resnet50"):
        return dataset_path
    from mlharness.manifest.assets import cache_dir
    from mlharness.tasks.imagenet.synth import write_synthetic_imagenet

    folder = cache_dir() / "bench" / f"imagenet-synth-{count}"
    if not (folder / "val_map.txt").is_file():
        write_synthetic_imagenet(folder, count)
    return str(folder)


def bench_overhead(cfg: BenchConfig) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="mlharness-bench-"))
    figures: dict[str, Any] = {"manifest": cfg.manifest, "rounds": cfg.rounds, "seconds": cfg.seconds}

    cfg.say("LoadGen null floor")
    floor_ss = loadgen_floor("SingleStream", min(cfg.seconds, 3.0), work / "floor_ss")
    floor_off = loadgen_floor("Offline", min(cfg.seconds, 3.0), work / "floor_off")
    null_path = work / "null.yaml"
    null_path.write_text(NULL_MANIFEST)
    cfg.say("null model through mlharness")
    null_ss = _run(cfg, str(null_path), "SingleStream", work / "null_ss", min_duration_ms=int(min(cfg.seconds, 3) * 1000),
                   target_latency_ms=0.02, min_query_count=100)
    null_off = _run(cfg, str(null_path), "Offline", work / "null_off", min_duration_ms=int(min(cfg.seconds, 3) * 1000),
                    target_qps=400_000, min_query_count=100)
    null_ss_p90 = float(null_ss.summary.fields["90.0th percentile latency (ns)"])
    cfg.say("null model with --trace model")
    traced = _run(cfg, str(null_path), "Offline", work / "null_off_traced",
                  min_duration_ms=int(min(cfg.seconds, 3) * 1000), target_qps=400_000, min_query_count=100,
                  trace="model")
    plain_sps, traced_sps = float(null_off.summary.metric_value or 0), float(traced.summary.metric_value or 0)
    figures.update(null_offline_traced_sps=traced_sps,
                   trace_model_cost_us=(1e6 / traced_sps - 1e6 / plain_sps) if plain_sps and traced_sps else None)
    figures.update(
        loadgen_null_singlestream_p90_us=floor_ss["p90_ns"] / 1e3,
        loadgen_null_offline_sps=floor_off["sps"],
        null_singlestream_p90_us=null_ss_p90 / 1e3,
        null_overhead_us=(null_ss_p90 - floor_ss["p90_ns"]) / 1e3,
        null_offline_sps=float(null_off.summary.metric_value or 0),
    )

    cfg.say(f"loading {cfg.manifest}")
    session = DirectModel(cfg.manifest, cfg.dataset_path, cfg.count, threads=cfg.threads)
    try:
        n = session.load(cfg.count)
        dataset_path = session.ctx.get("dataset_path")
        batch = session.loaded.model.batching.for_scenario("Offline")
        bare_sps, harness_sps, bare_p90, harness_p90 = [], [], [], []
        bare_lat: list[np.ndarray] = []
        for r in range(cfg.rounds):
            cfg.say(f"round {r + 1}/{cfg.rounds}: Offline bare / harness")
            bare_sps.append(bare_offline(session, n, batch, cfg.seconds))
            # at least 8 full batches: a run of 2-3 batches is dominated by its ragged last one
            seconds = max(cfg.seconds, 8 * batch / bare_sps[-1]) if bare_sps[-1] > 0 else cfg.seconds
            res = _run(cfg, cfg.manifest, "Offline", work / f"off_{r}", dataset_path,
                       min_duration_ms=int(seconds * 1000), target_qps=bare_sps[-1], min_query_count=1)
            harness_sps.append(float(res.summary.metric_value or 0))
            cfg.say(f"round {r + 1}/{cfg.rounds}: SingleStream bare / harness")
            lat = bare_latencies(session, n, cfg.seconds, min_count=200)
            bare_lat.append(lat)
            bare_p90.append(_p90(lat))
            # at least ~200 queries: the p90 of a few dozen is the 4th-largest latency, mostly noise
            seconds = max(cfg.seconds, 200 * float(np.median(lat)) / 1e9)
            res = _run(cfg, cfg.manifest, "SingleStream", work / f"ss_{r}", dataset_path,
                       min_duration_ms=int(seconds * 1000), target_latency_ms=float(np.median(lat)) / 1e6,
                       min_query_count=32)
            harness_p90.append(float(res.summary.fields["90.0th percentile latency (ns)"]))
        b_sps, h_sps = statistics.median(bare_sps), statistics.median(harness_sps)
        b_p90, h_p90 = statistics.median(bare_p90), statistics.median(harness_p90)
        figures.update(
            offline_batch=batch,
            offline_bare_sps=b_sps,
            offline_harness_sps=h_sps,
            offline_ratio=h_sps / b_sps,
            singlestream_bare_p90_ms=b_p90 / 1e6,
            singlestream_harness_p90_ms=h_p90 / 1e6,
            singlestream_p90_overhead_ms=(h_p90 - b_p90) / 1e6,
            singlestream_p90_overhead_pct=100.0 * (h_p90 - b_p90) / b_p90,
        )
        server_batch = session.loaded.model.batching.for_scenario("Server")
        sizes = sorted({*(2**k for k in range(1, 8) if 2**k < server_batch), server_batch} - {1})
        cfg.say(f"Server cost model: bare batch times for batch sizes {sizes} (batch 1: the SingleStream loops)")
        batch_ms = {1: float(np.median(np.concatenate(bare_lat))) / 1e6,
                    **bare_batch_ms(session, n, sizes, max(1.0, cfg.seconds / 3))}
        def trial(step: int, qps: float, bound_ms: float, queries: int) -> RunResult:
            return _run(cfg, cfg.manifest, "Server", work / f"server_{step}", dataset_path, trace="model",
                        min_duration_ms=1000, target_qps=qps, target_latency_ms=bound_ms, min_query_count=queries)

        figures.update(server_search(cfg, trial, offline_sps=h_sps, bound_ms=cfg.server_bound_ms or 6 * b_p90 / 1e6,
                                     batch_ms=batch_ms, server_batch=server_batch,
                                     bare_probe=lambda: bare_latencies(session, n, ADJACENT_BARE_S, 16)))
    finally:
        session.close()
    return figures


def format_figures(f: dict[str, Any]) -> str:
    rows = [
        ("LoadGen null floor, SingleStream p90", f"{f['loadgen_null_singlestream_p90_us']:.1f} us"),
        ("LoadGen null floor, Offline", f"{f['loadgen_null_offline_sps']:,.0f} samples/s"),
        ("null model through mlharness, SingleStream p90", f"{f['null_singlestream_p90_us']:.1f} us"),
        ("  harness cost per sample above the floor", f"{f['null_overhead_us']:.1f} us  (goal <= 30)"),
        ("null model through mlharness, Offline", f"{f['null_offline_sps']:,.0f} samples/s  (goal >= 100,000)"),
        ("  with --trace model", f"{f['null_offline_traced_sps']:,.0f} samples/s "
                                 f"({f['trace_model_cost_us'] or 0:+.2f} us per sample)"),
    ]
    if "offline_ratio" in f:
        rows += [
            (f"{f['manifest']} Offline bare (batch {f['offline_batch']})", f"{f['offline_bare_sps']:.2f} samples/s"),
            (f"{f['manifest']} Offline mlharness", f"{f['offline_harness_sps']:.2f} samples/s"),
            ("  ratio mlharness / bare", f"{f['offline_ratio']:.3f}  (goal >= 0.97)"),
            (f"{f['manifest']} SingleStream p90 bare", f"{f['singlestream_bare_p90_ms']:.2f} ms"),
            (f"{f['manifest']} SingleStream p90 mlharness", f"{f['singlestream_harness_p90_ms']:.2f} ms"),
            ("  overhead", f"{f['singlestream_p90_overhead_ms']:+.2f} ms ({f['singlestream_p90_overhead_pct']:+.1f}%)"
                           "  (goal: within 2% or 1 ms)"),
            (f"Server best VALID QPS at p99 <= {f['server_p99_bound_ms']:.1f} ms", f"{f['server_best_valid_qps']:.2f}"),
            ("  ratio Server / Offline", f"{f['server_ratio']:.3f}  (goal >= 0.75)"),
            ("  ideal-queue ceiling at p99 (no harness cost)", f"{f['server_ideal_qps']:.2f} QPS = "
                                                                 f"{f['server_ideal_ratio']:.3f} of Offline"),
            (f"  ... for a {f['server_trial_queries']}-query trial (p{f['server_trial_percentile']:.2f}), "
             f"{f['server_ideal_best_queue']}",
             f"{f['server_ideal_qps_at_trial_length']:.2f} QPS; measured {f['server_of_ideal']:.3f} of it  "
             "(goal >= 0.9)"),
        ]
        if "server_p99_cost_ms" in f:
            n = len([t for t in f["server_tried"] if "harness_p99_cost_ms" in t])
            rows += [
                ("  each trial through the ideal queue with its own arrivals and predict times:", ""),
                ("    harness p99 cost over it (median of trials)", f"{f['server_p99_cost_ms']:+.2f} ms"),
                ("    that cost as a ceiling ratio (ideal queue at bound - cost / at bound)",
                 f"{f['server_cost_as_ceiling_ratio']:.3f}  (goal >= 0.9)"),
                ("    trials VALID exactly where the ideal queue is", f"{f['server_verdicts_as_ideal']} of {n}")]
        for t in f.get("server_tried", []):
            line = f"{'VALID  ' if t['valid'] else 'INVALID'}  p99 {t['p99_ms']:.1f} ms"
            if "ideal_p99_ms" in t:
                line += (f" (ideal {t['ideal_p99_ms']:.1f}, {t['ideal_late']} late of {t['late_allowed']} allowed)"
                         f"  predict {t['predict_ms'] or 0:.1f} ms, bare before {t['bare_ms']:.1f} ms")
            rows += [(f"    trial at {t['qps']:.2f} QPS", line)]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


__all__ = ["BenchConfig", "bench_overhead", "format_figures"]
