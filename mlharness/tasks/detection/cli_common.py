"""The ``dataset synth`` and ``accuracy`` sub-commands the two detection tasks share, as one command table (their
cli modules name the task, the dataset flag and the handlers)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, accuracy, opt, synth


def detection_commands(name: str, synth_help: str, dir_flag: str, script: str, synth_run: Any,
                       accuracy_run: Any) -> TaskCommands:
    """A detection task's ``dataset synth NAME`` (``--out``, ``--count``, ``--seed``, the image sides; a folder
    is written as the writer decides, no ``--force``) and ``accuracy NAME`` (``--log``, the dataset folder by
    ``dir_flag``, ``--annotations``)."""
    return TaskCommands(
        synth=[synth(name, synth_help, synth_help + ". The oracle models of the matching manifests score exactly "
                     "mAP=100.000% on it with the reference pre-processing.", synth_run, count=64,
                     count_help="number of images (default: 64)", force=None, options=[
                         opt("--min-side", type=int, default=160, help="smallest image height/width (default: 160)"),
                         opt("--max-side", type=int, default=320, help="largest image height/width (default: 320)")])],
        accuracy=[accuracy(name, f"mAP of an accuracy log ({script})",
                           f"Score an mlperf_log_accuracy.json against the dataset's annotations as {script} does "
                           "and print what it prints, ending with mAP=...%.", accuracy_run, options=[
                               opt(dir_flag, dest="root", type=Path, required=True, help="the dataset folder"),
                               opt("--annotations", default=None,
                                   help="annotations file, relative to the dataset folder")])])


def run_accuracy(args: argparse.Namespace, metric: Any) -> int:
    from mlharness.tasks.base import AccuracyContext

    options = {"annotations": args.annotations} if args.annotations else {}
    result = metric.score(args.log, AccuracyContext(dataset_path=args.root.resolve(), count=0, options=options))
    sys.stdout.write(result.text)
    sys.stdout.flush()
    return 0
