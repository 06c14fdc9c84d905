#!/usr/bin/env python3
"""stable-diffusion-xl-random: the harness's overhead over the bare diffusers pipeline, and the peak memory of
an accuracy run as the number of images grows.

(a) Overhead, in one process: the pipeline the manifest's factory builds (tiny random SDXL networks, the real
    diffusers code, 2 steps), called directly on the benchmark's inputs (caption bytes and the fixed latent),
    against ``mlharness.run.runner.run`` of the same manifest (LoadGen, QSL, SUT, pre/post-processing).
    Bare and harness runs alternate; medians are reported. Offline: images/s, harness / bare. SingleStream:
    the p90 latency the harness adds.
(b) Peak memory: the maximum resident set (``wait4`` rusage of a child process) of a full ``mlharness run
    --mode accuracy`` (generation, LoadGen's accuracy log of 6 MiB of hex per image, CLIP and FID scoring with
    stand-in networks) with few and with many images. Were the images kept (by the SUT, the log writer or the
    metric), the peak would grow by at least 3 MiB (the uint8 image) per extra image; it should stay flat.

    .venv/bin/python scripts/bench_sdxl.py                 # 8 images, 2 rounds; memory: 10 vs 50 images
    .venv/bin/python scripts/bench_sdxl.py --quick         # 4 images, 1 round; memory: 2 vs 8 images
    .venv/bin/python scripts/bench_sdxl.py --json          # the figures as JSON on the last line
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = "stable-diffusion-xl-random"
IMAGE_MIB = 1024 * 1024 * 3 / 2**20  # one uint8 response
FLAT_MARGIN_MIB = 48.0  # allocator and interpreter noise allowed between two runs that hold no image


def say(text: str) -> None:
    print(f"[bench_sdxl] {text}", file=sys.stderr, flush=True)


def make_dataset(folder: Path, count: int, networks: bool) -> Path:
    from mlharness.cli import main

    args = ["dataset", "synth", "coco-captions", "--out", str(folder), "--count", str(count)]
    if main(args + (["--stand-in-networks"] if networks else [])) != 0:
        raise SystemExit(f"cannot write the synthetic caption set in {folder}")
    return folder


def scoring_manifest(work: Path) -> Path:
    """The random manifest scoring with the set's stand-in networks (the official weights need a download)."""
    from mlharness.manifest.loader import find_builtin

    text = find_builtin(MANIFEST).read_text()
    stats = "    statistics: val2014.npz\n"
    if stats not in text:
        raise SystemExit(f"{find_builtin(MANIFEST)}: no '{stats.strip()}' line to add the networks after")
    path = work / "sdxl-random-standin.yaml"
    path.write_text(text.replace(stats, stats + "    networks: networks\n"))
    return path


# ------------------------------------------------------------------------------------------------ overhead
class BarePipeline:
    """The manifest's model built by its own factory and arguments, fed the benchmark's tensors directly."""

    def __init__(self, dataset: Path, count: int, threads: int | None) -> None:
        import torch

        from mlharness.manifest.loader import load_manifest
        from mlharness.predictors.threads import intra_op_threads
        from mlharness.tasks.coco_t2i import dataset as coco_t2i
        from mlharness.tasks.coco_t2i.models import encode_caption, random_sdxl

        model = load_manifest(MANIFEST).model
        # the intra-op threads the harness's pytorch predictor picks (or is given): the same for both sides
        self.threads = intra_op_threads(threads, torch.get_num_threads())[0]
        torch.set_num_threads(self.threads)
        self.offline_batch = model.batching.for_scenario("Offline")
        self.module = random_sdxl(**model.framework.options["factory_args"]).eval()
        captions = coco_t2i.caption_set(dataset, count)
        latent = coco_t2i.read_latents(captions.root / coco_t2i.LATENTS)[0]
        self.captions = torch.from_numpy(np.stack([encode_caption(c) for c in captions.captions]))
        self.latent = latent
        self.count = len(captions.captions)
        self.torch = torch

    def images(self, indices: list[int]) -> np.ndarray:
        with self.torch.inference_mode():
            latents = self.latent.unsqueeze(0).expand(len(indices), -1, -1, -1)
            return self.module(self.captions[indices], latents).numpy()

    def offline_sps(self) -> float:
        self.images(list(range(min(self.count, self.offline_batch))))  # warm-up, at the batch size timed
        start = time.perf_counter()
        for s in range(0, self.count, self.offline_batch):
            self.images(list(range(s, min(self.count, s + self.offline_batch))))
        return self.count / (time.perf_counter() - start)

    def latencies_ns(self) -> np.ndarray:
        self.images([0])
        out = []
        for i in range(self.count):
            t = time.perf_counter_ns()
            self.images([i])
            out.append(time.perf_counter_ns() - t)
        return np.array(out, dtype=np.float64)


def harness_run(dataset: Path, count: int, threads: int | None, scenario: str, out: Path, **overrides: Any):
    from mlharness.loadgen import settings as lgs
    from mlharness.run.runner import RunOptions, run

    return run(RunOptions(scenario=scenario, mode="performance", manifest=MANIFEST, dataset_path=str(dataset),
                          output=out, count=count, threads=threads, telemetry_interval_ms=0,
                          overrides=lgs.Overrides(min_duration_ms=1, min_query_count=count, **overrides)))


def overhead(work: Path, count: int, rounds: int, threads: int | None) -> dict[str, Any]:
    dataset = make_dataset(work / "perf-set", count, networks=False)
    say(f"building the bare pipeline ({count} captions)")
    bare = BarePipeline(dataset, count, threads)
    bare_sps, harness_sps, bare_p90, harness_p90 = [], [], [], []
    for r in range(rounds):
        say(f"round {r + 1}/{rounds}: Offline, bare then harness")
        bare_sps.append(bare.offline_sps())
        res = harness_run(dataset, count, threads, "Offline", work / f"offline_{r}", target_qps=bare_sps[-1])
        harness_sps.append(float(res.summary.metric_value or 0))
        say(f"round {r + 1}/{rounds}: SingleStream, bare then harness")
        lat = bare.latencies_ns()
        bare_p90.append(float(np.percentile(lat, 90)))
        res = harness_run(dataset, count, threads, "SingleStream", work / f"ss_{r}",
                          target_latency_ms=float(np.median(lat)) / 1e6)
        harness_p90.append(float(res.summary.fields["90.0th percentile latency (ns)"]))
    b_sps, h_sps = statistics.median(bare_sps), statistics.median(harness_sps)
    b_p90, h_p90 = statistics.median(bare_p90), statistics.median(harness_p90)
    return {"images": count, "rounds": rounds, "offline_batch": bare.offline_batch, "threads": bare.threads,
            "offline_bare_sps": b_sps, "offline_harness_sps": h_sps, "offline_ratio": h_sps / b_sps,
            "singlestream_bare_p90_ms": b_p90 / 1e6, "singlestream_harness_p90_ms": h_p90 / 1e6,
            "singlestream_p90_added_ms": (h_p90 - b_p90) / 1e6,
            "singlestream_p90_added_pct": 100.0 * (h_p90 - b_p90) / b_p90}


# -------------------------------------------------------------------------------------------------- memory
def accuracy_peak(manifest: Path, dataset: Path, count: int, out: Path, env: dict[str, str]) -> dict[str, Any]:
    """Max RSS (MiB) of one ``mlharness run --mode accuracy`` of ``count`` images in a child process, with the
    size of the accuracy log it wrote and the figures it printed."""
    argv = [sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--dataset-path",
            str(dataset), "--scenario", "Offline", "--mode", "accuracy", "--count", str(count), "--output",
            str(out), "--no-progress"]
    log = out.with_suffix(".log")
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"the accuracy run of {count} images failed ({proc.returncode}); see {log}:\n"
                         + log.read_text()[-2000:])
    entries = (out / "mlperf_log_accuracy.json").stat().st_size
    return {"images": count, "peak_rss_mib": usage.ru_maxrss / 1024, "seconds": time.perf_counter() - start,
            "accuracy_log_mib": entries / 2**20, "accuracy": (out / "accuracy.txt").read_text().strip()}


def memory(work: Path, small: int, large: int) -> dict[str, Any]:
    dataset = make_dataset(work / "acc-set", large, networks=True)
    manifest = scoring_manifest(work)
    env = dict(os.environ)
    runs = []
    for count in (small, large):
        say(f"accuracy run of {count} images in a child process")
        runs.append(accuracy_peak(manifest, dataset, count, work / f"acc_{count}", env))
    growth = runs[1]["peak_rss_mib"] - runs[0]["peak_rss_mib"]
    held = (large - small) * IMAGE_MIB  # what keeping the extra images would add at the least
    return {"runs": runs, "growth_mib": growth, "growth_per_image_mib": growth / (large - small),
            "extra_images_mib": held, "flat": growth < min(FLAT_MARGIN_MIB, held)}


def format_figures(f: dict[str, Any]) -> str:
    o, m = f["overhead"], f["memory"]
    rows = [
        f"overhead: {o['images']} images, {o['rounds']} round(s), medians; Offline batch {o['offline_batch']}, "
        f"{o['threads']} intra-op thread(s)",
        f"  Offline bare pipeline            {o['offline_bare_sps']:.3f} images/s",
        f"  Offline mlharness run            {o['offline_harness_sps']:.3f} images/s",
        f"  Offline throughput ratio         {o['offline_ratio']:.3f} (harness / bare)",
        f"  SingleStream p90 bare            {o['singlestream_bare_p90_ms']:.1f} ms",
        f"  SingleStream p90 mlharness       {o['singlestream_harness_p90_ms']:.1f} ms",
        f"  SingleStream p90 added           {o['singlestream_p90_added_ms']:+.1f} ms "
        f"({o['singlestream_p90_added_pct']:+.2f}%)",
        "peak memory of an accuracy run (max RSS of the child process):",
    ]
    for r in m["runs"]:
        rows.append(f"  {r['images']:>3} images: {r['peak_rss_mib']:.0f} MiB peak, accuracy log "
                    f"{r['accuracy_log_mib']:.0f} MiB, {r['seconds']:.0f} s")
    verdict = "flat: images are not held" if m["flat"] else "GROWS with the image count"
    rows.append(f"  growth {m['growth_mib']:+.1f} MiB ({m['growth_per_image_mib']:+.2f} MiB per image; keeping "
                f"the extra images would add >= {m['extra_images_mib']:.0f} MiB): {verdict}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 images, 1 round; memory of 2 vs 8 images")
    parser.add_argument("--images", type=int, default=None, help="images of the overhead runs (default 8)")
    parser.add_argument("--rounds", type=int, default=None, help="bare/harness rounds (default 2)")
    parser.add_argument("--memory-images", type=int, nargs=2, default=None, metavar=("FEW", "MANY"),
                        help="image counts of the two accuracy runs (default 10 50)")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads of both sides (default: "
                        "what the harness's pytorch predictor picks)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep data and runs here (default: temp)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on the last line")
    args = parser.parse_args()
    images = args.images or (4 if args.quick else 8)
    rounds = args.rounds or (1 if args.quick else 2)
    small, large = args.memory_images or ((2, 8) if args.quick else (10, 50))
    if not 0 < small < large:
        parser.error(f"--memory-images: expected FEW < MANY, both positive, got {small} {large}")
    with tempfile.TemporaryDirectory(prefix="bench-sdxl-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        figures = {"manifest": MANIFEST, "overhead": overhead(work, images, rounds, args.threads),
                   "memory": memory(work, small, large)}
    print(format_figures(figures))
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
