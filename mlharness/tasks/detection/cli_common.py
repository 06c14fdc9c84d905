"""The ``dataset synth`` and ``accuracy`` sub-commands the two detection tasks share (their cli modules name the
task, the dataset flag and the writer)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_synth(synth: Any, name: str, help_text: str, func: Any) -> None:
    p = synth.add_parser(name, help=help_text, description=help_text + ". The oracle models of the matching "
                         "manifests score exactly mAP=100.000% on it with the reference pre-processing.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=64, help="number of images (default: 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-side", type=int, default=160, help="smallest image height/width (default: 160)")
    p.add_argument("--max-side", type=int, default=320, help="largest image height/width (default: 320)")
    p.set_defaults(func=func)


def add_accuracy(accuracy: Any, name: str, dir_flag: str, script: str, func: Any) -> None:
    a = accuracy.add_parser(name, help=f"mAP of an accuracy log ({script})",
                            description=f"Score an mlperf_log_accuracy.json against the dataset's annotations "
                                        f"as {script} does and print what it prints, ending with mAP=...%.")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument(dir_flag, dest="root", type=Path, required=True, help="the dataset folder")
    a.add_argument("--annotations", default=None, help="annotations file, relative to the dataset folder")
    a.set_defaults(func=func)


def run_accuracy(args: argparse.Namespace, metric: Any) -> int:
    from mlharness.tasks.base import AccuracyContext

    options = {"annotations": args.annotations} if args.annotations else {}
    result = metric.score(args.log, AccuracyContext(dataset_path=args.root.resolve(), count=0, options=options))
    sys.stdout.write(result.text)
    sys.stdout.flush()
    return 0
