"""``mlharness dataset synth vbench-prompts`` and ``mlharness accuracy wan22``; torch is imported in the
handlers so ``mlharness --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("vbench-prompts", help="a synthetic VBench prompt set (wan-2.2-t2v-a14b layout)",
                         description="Write vbench_prompts.txt, fixed_latent.pt (a (1, 16, 2, 4, 4) latent: 5 "
                                     "frames of 32x32 from the tiny pipelines) and reference_videos/<i>.npy, what "
                                     "the oracle answers with and the stand-in scorers compare against.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=8, help="number of prompts (default: 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)

    a = accuracy.add_parser("wan22", help="the VBench score of a video accuracy log (stand-in scorers)",
                            description="Score an mlperf_log_accuracy.json of videos with the six dimensions' "
                                        "stand-in scorers and print run_evaluation.py's summary of them.")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument("--dataset-path", type=Path, required=True, help="the folder with vbench_prompts.txt")
    a.add_argument("--video-shape", type=int, nargs=4, metavar=("FRAMES", "HEIGHT", "WIDTH", "3"), required=True)
    a.add_argument("--dtype", choices=("uint8", "float32"), default="uint8", help="what the log holds")
    a.set_defaults(func=cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.wan22.synth import write_synthetic_prompts
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    out = write_synthetic_prompts(args.out, count=args.count, seed=args.seed)
    console.print(f"wrote {args.count} prompts, the fixed latent and the reference videos to {out}",
                  highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.wan22.metric import VBenchMetric

    options = {"video_shape": list(args.video_shape), "video_dtype": args.dtype}
    result = VBenchMetric().score(args.log, AccuracyContext(dataset_path=args.dataset_path, count=0,
                                                            options=options))
    sys.stdout.write(result.text)
    sys.stdout.flush()
    return 0
