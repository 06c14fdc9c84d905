#!/usr/bin/env python3
"""wan-2.2-t2v-a14b-random: the peak memory of an accuracy run as the number of videos grows (10 vs 50 by
default), side by side in one invocation.

Each run is a full ``mlharness run --mode accuracy`` in a child process (generation by the tiny random Wan
pipeline, LoadGen's accuracy log of hex videos, the six stand-in VBench scorers, the checker's sample mp4 files);
its peak is the maximum resident set of that child (``wait4`` rusage). The videos are made larger than the
manifest's 5x32x32 (default 17 frames of 256x256, 3 MiB each: a latent of (1, 16, 5, 32, 32)) so that keeping
them would show: were the videos held (by the SUT, the log writer or the metric) the peak would grow by at least
3 MiB per extra video, 120 MiB from 10 to 50; it should stay flat. Both runs load the same number of samples at
once (``--performance-sample-count``), so only the number of videos differs.

    .venv/bin/python scripts/bench_wan22_memory.py                 # 10 vs 50 videos of 17x256x256
    .venv/bin/python scripts/bench_wan22_memory.py --videos 2 6 --latent 2 4 4 --json   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MANIFEST = "wan-2.2-t2v-a14b-random"
FLAT_MARGIN_MIB = 48.0  # allocator and interpreter noise allowed between two runs that hold no video
LOADED = 10  # samples loaded at once in both runs


def say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def video_shape(latent: tuple[int, int, int]) -> tuple[int, int, int, int]:
    from mlharness.tasks.wan22.dataset import video_size

    return (*video_size((1, 16, *latent)), 3)


def make_manifest(work: Path, latent: tuple[int, int, int]) -> Path:
    """The random manifest with the latent and video sizes of ``latent`` (the tiny networks take any size)."""
    from mlharness.manifest.loader import find_builtin

    text = find_builtin(MANIFEST).read_text()
    for old, new in (("shape: [16, 2, 4, 4]", f"shape: [16, {', '.join(map(str, latent))}]"),
                     ("shape: [5, 32, 32, 3]", f"shape: [{', '.join(map(str, video_shape(latent)))}]")):
        if old not in text:
            raise SystemExit(f"{MANIFEST}: no '{old}' to resize; update this script with the manifest")
        text = text.replace(old, new)
    path = work / "wan22-random-bench.yaml"
    path.write_text(text)
    return path


def accuracy_peak(manifest: Path, dataset: Path, count: int, out: Path) -> dict[str, Any]:
    """Max RSS (MiB) of one ``mlharness run --mode accuracy`` of ``count`` videos in a child process, with the
    size of the accuracy log it wrote and the figure it printed."""
    argv = [sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--dataset-path",
            str(dataset), "--scenario", "Offline", "--mode", "accuracy", "--count", str(count),
            "--performance-sample-count", str(min(LOADED, count)), "--output", str(out), "--no-progress"]
    log = out.with_suffix(".log")
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"the accuracy run of {count} videos failed ({code}); see {log}:\n" + log.read_text()[-2000:])
    text = (out / "accuracy.txt").read_text().strip().splitlines()
    return {"videos": count, "peak_rss_mib": usage.ru_maxrss / 1024, "seconds": time.perf_counter() - start,
            "accuracy_log_mib": (out / "mlperf_log_accuracy.json").stat().st_size / 2**20,
            "accuracy": text[-1] if text else ""}


def memory(work: Path, small: int, large: int, latent: tuple[int, int, int]) -> dict[str, Any]:
    from mlharness.tasks.wan22.synth import write_synthetic_prompts

    dataset = write_synthetic_prompts(work / "prompts", count=large, latent_shape=(1, 16, *latent))
    manifest = make_manifest(work, latent)
    runs = []
    for count in (small, large):
        say(f"accuracy run of {count} videos in a child process")
        runs.append(accuracy_peak(manifest, dataset, count, work / f"acc_{count}"))
    frames, height, width, _ = video_shape(latent)
    video_mib = frames * height * width * 3 / 2**20
    growth = runs[1]["peak_rss_mib"] - runs[0]["peak_rss_mib"]
    held = (large - small) * video_mib  # what keeping the extra videos would add at the least
    return {"video_shape": [frames, height, width, 3], "video_mib": video_mib, "runs": runs, "growth_mib": growth,
            "growth_per_video_mib": growth / (large - small), "extra_videos_mib": held,
            "flat": growth < min(FLAT_MARGIN_MIB, held)}


def format_figures(m: dict[str, Any]) -> str:
    f, h, w, _ = m["video_shape"]
    rows = [f"peak memory of a wan-2.2-t2v-a14b-random accuracy run (max RSS of the child process; videos of "
            f"{f}x{h}x{w}, {m['video_mib']:.1f} MiB each; {LOADED} samples loaded at once):"]
    for r in m["runs"]:
        rows.append(f"  {r['videos']:>3} videos: {r['peak_rss_mib']:.0f} MiB peak, accuracy log "
                    f"{r['accuracy_log_mib']:.0f} MiB, {r['seconds']:.0f} s; {r['accuracy']}")
    verdict = "flat: videos are not held" if m["flat"] else "GROWS with the video count"
    rows.append(f"  growth {m['growth_mib']:+.1f} MiB ({m['growth_per_video_mib']:+.2f} MiB per video; keeping "
                f"the extra videos would add >= {m['extra_videos_mib']:.0f} MiB): {verdict}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, nargs=2, default=(10, 50), metavar=("FEW", "MANY"),
                        help="video counts of the two accuracy runs (default 10 50)")
    parser.add_argument("--latent", type=int, nargs=3, default=(5, 32, 32), metavar=("T", "H", "W"),
                        help="latent frames, height, width (default 5 32 32: 17 frames of 256x256)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep data and runs here (default: temp)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on the last line")
    args = parser.parse_args()
    small, large = args.videos
    if not 0 < small < large:
        parser.error(f"--videos: expected FEW < MANY, both positive, got {small} {large}")
    with tempfile.TemporaryDirectory(prefix="bench-wan22-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        figures = memory(work, small, large, tuple(args.latent))
    print(format_figures(figures))
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
