"""``mlharness dataset synth vbench-prompts`` and ``mlharness accuracy wan22``; torch is imported in the
handlers so ``mlharness --help`` stays fast."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import Command, TaskCommands, opt, synth
from mlharness.tasks.generative_cli import print_result, write_synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.wan22.synth import write_synthetic_prompts

    return write_synth(args, console, write_synthetic_prompts, 8,
                       " (prompts), the fixed latent and the reference videos to {out}")


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from rich.markup import escape

    from mlharness.errors import SettingsError
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.wan22.metric import VBenchMetric

    if args.setup:
        from mlharness.tasks.wan22 import vbench_env

        def say(line: str) -> None:
            console.print(escape(line), highlight=False)

        if not args.no_venv:
            say(f"vbench's environment is ready: {vbench_env.setup(args.venv, say=say)}")
        say(f"VBench's networks are in {vbench_env.fetch_weights(vbench_env.DIMENSIONS_ALL, say=say)}")
        if args.log is None:
            return 0
    if args.log is None or args.dataset_path is None or args.video_shape is None:
        raise SettingsError("mlharness accuracy wan-2.2: give --log, --dataset-path and --video-shape (an accuracy "
                            "log to score), --setup, or both")
    options = {"video_shape": list(args.video_shape), "video_dtype": args.dtype, "scorers": args.scorers}
    return print_result(VBenchMetric().score(args.log, AccuracyContext(dataset_path=args.dataset_path, count=0,
                                                                       options=options)))


COMMANDS = TaskCommands(
    synth=[synth("vbench-prompts", "a synthetic VBench prompt set (wan-2.2-t2v-a14b layout)",
                 "Write vbench_prompts.txt, fixed_latent.pt (a (1, 16, 2, 4, 4) latent: 5 frames of 32x32 from the "
                 "tiny pipelines) and reference_videos/<i>.npy, what the oracle answers with and the stand-in "
                 "scorers compare against.", cmd_synth, count=None, count_help="number of prompts (default: 8)")],
    # not accuracy(...): --log is optional (--setup alone), and the command has an alias
    accuracy=[Command("wan22", "the VBench score of a video accuracy log",
                              "Score an mlperf_log_accuracy.json of videos on the six dimensions and print "
                              "run_evaluation.py's summary of them: with the stand-in scorers, or with real VBench "
                              "in its own environment (--scorers vbench; --setup makes it and fetches its networks).",
                              cmd_accuracy, (
        opt("--log", type=Path, default=None, help="mlperf_log_accuracy.json"),
        opt("--dataset-path", type=Path, default=None, help="the folder with vbench_prompts.txt"),
        opt("--video-shape", type=int, nargs=4, metavar=("FRAMES", "HEIGHT", "WIDTH", "3")),
        opt("--dtype", choices=("uint8", "float32"), default="uint8", help="what the log holds"),
        opt("--scorers", choices=("stand-in", "stand-in-files", "vbench"), default="stand-in",
            help="stand-in (in this process), stand-in-files (the same over written mp4 files, in a subprocess), "
                 "vbench (real VBench in its environment)"),
        opt("--setup", action="store_true",
            help="make vbench's environment (pinned vbench and torch, from PyPI; gigabytes) and fetch the six "
                 "dimensions' networks into mlharness's cache, where runs find both"),
        opt("--venv", type=Path, default=None, help="with --setup: the folder to make it in (default: <mlharness "
            "cache>/vbench-<version>; elsewhere, point MLHARNESS_VBENCH_PYTHON at its bin/python)"),
        opt("--no-venv", action="store_true", help="with --setup: fetch the networks only")),
                      aliases=("wan-2.2",))],
)
register = COMMANDS.register
