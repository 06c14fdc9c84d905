"""Offline throughput of the random-weight ResNet50 through mlharness vs a bare ONNX Runtime loop.

    .venv/bin/python scripts/bench_resnet50.py [--count 64] [--batch 8] [--seconds 10] [--rounds 3]

Both sides run the same generated model (mlharness/manifests/resnet50/resnet50-random.yaml) with the same session
options on the same pre-processed batches of a synthetic ImageNet (generated in the cache on first use).
Rounds alternate bare / mlharness so a machine that speeds up or slows down affects both alike; medians are
reported. The mlharness side is a real LoadGen Offline test (development settings: short duration, --count).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mlharness.loadgen import settings as lgs
from mlharness.manifest.assets import cache_dir
from mlharness.manifest.loader import load_manifest
from mlharness.run.factory import resolve_model_file
from mlharness.run.runner import RunOptions, run
from mlharness.tasks.imagenet import preprocess as vision
from mlharness.tasks.imagenet.dataset import validation_files
from mlharness.tasks.imagenet.synth import write_synthetic_imagenet

MANIFEST = "resnet50-random"


def bare_offline(session, batches: list[np.ndarray], seconds: float) -> float:  # noqa: ANN001
    """Samples/s of ``session.run`` alone, cycling over the batches for about ``seconds``."""
    session.run(["ArgMax:0"], {"input_tensor:0": batches[0]})  # warm-up, as mlharness does
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for b in batches:
            session.run(["ArgMax:0"], {"input_tensor:0": b})
            done += len(b)
    return done / (time.perf_counter() - start)


def harness_offline(dataset: Path, count: int, batch: int, seconds: float, target_qps: float,
                    threads: int | None, out: Path) -> float:
    opts = RunOptions(scenario="Offline", mode="performance", manifest=MANIFEST, dataset_path=dataset,
                      output=out, count=count, max_batchsize=batch, threads=threads,
                      overrides=lgs.Overrides(min_duration_ms=int(seconds * 1000), min_query_count=1,
                                              target_qps=target_qps))
    result = run(opts)
    if not result.summary.valid:
        logging.warning("mlharness run %s was INVALID (too short?)", out)
    return float(result.summary.metric_value or 0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=64, help="distinct samples (default 64)")
    ap.add_argument("--batch", type=int, default=8, help="Offline batch size on both sides (default 8)")
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each timed run (default 10)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="ONNX Runtime intra-op threads (default: all)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    dataset = cache_dir() / "bench" / f"imagenet-synth-{args.count}"
    if not (dataset / "val_map.txt").is_file():
        write_synthetic_imagenet(dataset, args.count)
    import onnxruntime as ort

    loaded = load_manifest(MANIFEST)
    model = resolve_model_file(loaded)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # as the manifest asks
    if args.threads:
        so.intra_op_num_threads = args.threads
    session = ort.InferenceSession(str(model), sess_options=so, providers=["CPUExecutionProvider"])
    x = np.stack([vision.preprocess_onnx_tf(p) for p in validation_files(dataset, args.count)])
    batches = [x[i:i + args.batch] for i in range(0, len(x), args.batch)]

    bare, harness = [], []
    with tempfile.TemporaryDirectory(prefix="mlharness-bench-r50-") as work:
        for r in range(args.rounds):
            bare.append(bare_offline(session, batches, args.seconds))
            # expected QPS well above the bare rate, so the Offline query outlasts the minimum duration
            harness.append(harness_offline(dataset, args.count, args.batch, args.seconds, 2.0 * bare[-1],
                                           args.threads, Path(work) / f"run_{r}"))
            print(f"round {r + 1}/{args.rounds}: bare {bare[-1]:.2f} samples/s, mlharness {harness[-1]:.2f} "
                  f"samples/s", file=sys.stderr)
    b, h = statistics.median(bare), statistics.median(harness)
    print(f"{MANIFEST} Offline, batch {args.batch}, {args.count} samples, {args.seconds:.0f} s runs, "
          f"median of {args.rounds}")
    print(f"  bare onnxruntime  {b:8.2f} samples/s")
    print(f"  mlharness         {h:8.2f} samples/s")
    print(f"  ratio             {h / b:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
