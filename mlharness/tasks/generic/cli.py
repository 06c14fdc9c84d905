"""``mlharness accuracy generic``: score an accuracy log with a generic metric against a labels file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import Command, TaskCommands, opt

NAMES = ("top1", "top5", "exact_match", "token_f1", "mean_absolute_error", "mean_squared_error", "detection_map")


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks import METRICS
    from mlharness.tasks.base import AccuracyContext

    options: dict[str, Any] = {"label_offset": args.label_offset}
    if args.labels is not None:
        options["annotations" if args.metric == "detection_map" else "labels"] = str(args.labels.resolve())
    if args.dtype:
        options["dtype"] = args.dtype
    if args.features:
        options["features"] = args.features
    if args.tokenizer:
        options["tokenizer"] = str(Path(args.tokenizer).expanduser().resolve())
    ctx = AccuracyContext(dataset_path=args.dataset_path, count=0, options=options)
    result = METRICS.get(args.metric)().score(args.log, ctx)
    sys.stdout.write(result.text)
    sys.stdout.flush()
    return 0


COMMANDS = TaskCommands(
    accuracy=[Command("generic", "top-1/top-5, exact match/F1, MAE/MSE or mAP against a labels file",
                      "Score an mlperf_log_accuracy.json with a generic metric and print its accuracy.txt line.",
                      cmd_accuracy, (
        opt("--metric", required=True, choices=NAMES),
        opt("--log", type=Path, required=True, help="mlperf_log_accuracy.json"),
        opt("--labels", type=Path, default=None,
            help="labels file (one per line, '<file> <label>' lines or a CSV); detection: the COCO json"),
        opt("--dataset-path", type=Path, default=None, help="the dataset folder (file names for matching)"),
        opt("--dtype", default=None, help="response dtype (default: float32)"),
        opt("--features", default=None, help="class names file (MLModelScope's synset)"),
        opt("--tokenizer", default=None,
            help="exact_match/token_f1 over token ids: the folder of the tokenizer that decodes them"),
        opt("--label-offset", type=int, default=0, help="added to the position of the best score")))],
)
register = COMMANDS.register
