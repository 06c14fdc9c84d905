"""``mlharness dataset synth vbench-prompts`` and ``mlharness accuracy wan22``; torch is imported in the
handlers so ``mlharness --help`` stays fast."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.generative_cli import add_synth, print_result, write_synth


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    add_synth(synth, "vbench-prompts", "a synthetic VBench prompt set (wan-2.2-t2v-a14b layout)",
              "Write vbench_prompts.txt, fixed_latent.pt (a (1, 16, 2, 4, 4) latent: 5 frames of 32x32 from the tiny "
              "pipelines) and reference_videos/<i>.npy, what the oracle answers with and the stand-in scorers "
              "compare against.", "number of prompts (default: 8)", cmd_synth)

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

    return write_synth(args, console, write_synthetic_prompts, 8,
                       " (prompts), the fixed latent and the reference videos to {out}")


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.wan22.metric import VBenchMetric

    options = {"video_shape": list(args.video_shape), "video_dtype": args.dtype}
    return print_result(VBenchMetric().score(args.log, AccuracyContext(dataset_path=args.dataset_path, count=0,
                                                                       options=options)))
