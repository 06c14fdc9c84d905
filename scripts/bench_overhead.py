"""Harness overhead on the demo: Offline samples/s through mlharness + LoadGen vs a bare ONNX Runtime loop over
the same pre-processed batches. The demo model is tiny, so this is the worst case for relative overhead.

    .venv/bin/python scripts/bench_overhead.py [--batch 32] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def bare(model: Path, images: list[Path], batch: int, seconds: float, threads: int | None) -> float:
    import onnxruntime as ort

    from mlharness.tasks.demo import preprocess_demo

    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    data = np.stack([preprocess_demo(p) for p in images])
    n, done, start = len(data), 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for s in range(0, n, batch):
            out = sess.run(["label"], {"image": data[s:s + batch]})[0]
            _ = out.astype(np.float32).tobytes()
            done += len(out)
    return done / (time.perf_counter() - start)


def harness(batch: int, seconds: float, qps: float, threads: int | None) -> float:
    from mlharness.loadgen.runner import RunOptions, run
    from mlharness.loadgen.settings import Overrides

    out = Path(tempfile.mkdtemp()) / "perf"
    result = run(RunOptions(scenario="Offline", mode="performance", output=out, max_batchsize=batch,
                            threads=threads,
                            overrides=Overrides(min_duration_ms=int(seconds * 1000), target_qps=qps,
                                                min_query_count=1)))
    return float(result.summary.metric_value or 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    os.environ.setdefault("MLHARNESS_CACHE", str(Path(tempfile.gettempdir()) / "mlharness-bench-cache"))
    from mlharness.manifest.assets import cache_dir
    from mlharness.tasks.demo import demo_root, ensure_demo_dataset, ensure_demo_model

    model = ensure_demo_model(cache_dir() / "generated" / "demo" / "demo_oracle.onnx")
    root = ensure_demo_dataset(demo_root() / "images", count=256)
    images = sorted(root.glob("*.JPEG"))[:256]
    b = bare(model, images, args.batch, args.seconds, args.threads)
    h = harness(args.batch, args.seconds, qps=b, threads=args.threads)
    print(f"bare onnxruntime : {b:12,.0f} samples/s")
    print(f"mlharness Offline: {h:12,.0f} samples/s")
    print(f"ratio            : {h / b:12.3f}  (harness / bare; 1.0 = no overhead)")


if __name__ == "__main__":
    main()
