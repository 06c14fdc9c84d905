#!/usr/bin/env python3
"""Peak memory of the 3D U-Net sliding window with the full-size (random-weight) network on one synthetic case.

Writes one synthetic KiTS19 case, pre-processes it like the reference, builds the random 3D U-Net (widths 32..320)
and runs :func:`mlharness.tasks.kits19.sliding_window.segment_volume` through onnxruntime, printing the resident memory
after every model call and the peak.  The resident memory should rise once (onnxruntime's activations for the first
patch batch, plus the two accumulators of the volume), once more at the second call (onnxruntime's memory-pattern
planner allocates its block on the second run of a session), and then stay flat however many windows and passes
follow: nothing is kept per patch or per case.

    .venv/bin/python scripts/bench_3dunet_memory.py                 # case 2: 128x192x192, 4 windows
    .venv/bin/python scripts/bench_3dunet_memory.py --case 3 --patch-batch 2 --threads 2
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", type=int, default=2, help="synthetic case index (0: 128^3 ... 3: 192x128x192)")
    parser.add_argument("--patch-batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2, help="segment the case this many times (default 2)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the case and model here (default: temp)")
    args = parser.parse_args()

    import onnxruntime as ort

    from mlharness.tasks.kits19 import dataset as kits19
    from mlharness.tasks.kits19 import models as kits19_models
    from mlharness.tasks.kits19 import sliding_window
    from mlharness.tasks.kits19 import synth as kits19_synth

    with tempfile.TemporaryDirectory(prefix="bench-3dunet-") as tmp:
        work = args.workdir or Path(tmp)
        raw, prep = work / "raw", work / "prep"
        kits19_synth.write_dataset(raw, args.case + 1)
        case = f"case_{args.case:05d}"
        kits19.prepare(raw, prep, [case])
        volume = kits19.PreparedKits19.open(prep).image(0)
        model = kits19_models.ensure_random_unet(work / f"unet3d_random_w{args.width}_d{args.depth}.onnx")
        opts = ort.SessionOptions()
        if args.threads:
            opts.intra_op_num_threads = args.threads
        session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        windows = len(sliding_window.window_positions(volume.shape[1:]))
        voxels = int(np.prod(volume.shape[1:]))
        print(f"{case}: volume {volume.shape[1:]} ({voxels * 4 / 2**20:.0f} MiB float32), {windows} windows, "
              f"model {model.stat().st_size / 2**20:.0f} MiB, patch batch {args.patch_batch}")
        print(f"accumulators: {voxels * 16 / 2**20:.0f} MiB (3-class float32 sum + float32 weights)")
        base = rss_mib()
        print(f"resident before the sliding window: {base:.0f} MiB")
        calls: list[tuple[float, float]] = []

        def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
            t = time.perf_counter()
            out = session.run(["output"], {"input": inputs[0]})
            calls.append((time.perf_counter() - t, rss_mib()))
            print(f"  call {len(calls)}: {inputs[0].shape[0]} patch(es) in {calls[-1][0]:.1f} s, resident "
                  f"{calls[-1][1]:.0f} MiB", flush=True)
            return out

        for n in range(args.repeat):
            t0 = time.perf_counter()
            labels = sliding_window.segment_volume(run, volume, batch=args.patch_batch)
            total = time.perf_counter() - t0
            counts = np.bincount(labels.ravel(), minlength=3).tolist()
            print(f"pass {n + 1}: segmented in {total:.1f} s ({total / windows:.1f} s per window); voxels per class "
                  f"{counts}; resident {rss_mib():.0f} MiB")
        settled = [r for _, r in calls[1:]]
        if settled:
            print(f"resident from the second call on: {min(settled):.0f} to {max(settled):.0f} MiB over "
                  f"{len(settled)} call(s)")
        print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
