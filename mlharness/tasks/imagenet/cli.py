"""``mlharness dataset synth imagenet`` and ``mlharness accuracy imagenet``.

Kept light: numpy, Pillow and onnx are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, accuracy, opt, synth

DTYPE_CHOICES = ("float32", "int32", "int64")  # the official accuracy-imagenet.py's --dtype choices


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.imagenet.synth import kind_of, write_synthetic_imagenet
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    out = write_synthetic_imagenet(args.out, count=args.count, seed=args.seed)
    kinds = [kind_of(i) for i in range(args.count)]
    console.print(f"wrote {args.count} images ({kinds.count('gray')} grayscale, {kinds.count('cmyk')} CMYK) and "
                  f"val_map.txt to {out}", highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.imagenet.metric import ImagenetTop1Metric

    ctx = AccuracyContext(dataset_path=None, count=0,
                          options={"val_map": str(args.val_map.resolve()), "dtype": args.dtype})
    result = ImagenetTop1Metric().score(args.log, ctx)
    sys.stdout.write(result.text)  # exactly what accuracy.txt holds, as the official script prints it
    sys.stdout.flush()
    return 0


COMMANDS = TaskCommands(
    synth=[synth("imagenet", "a synthetic ImageNet validation set (JPEGs + val_map.txt)",
                 "Write ILSVRC2012_val_XXXXXXXX.JPEG images of varied sizes (some grayscale, some CMYK) and "
                 "val_map.txt; the resnet50-oracle model scores exactly 100% top-1 on them with the reference "
                 "pre-processing.", cmd_synth, count=500, count_help="number of images (default: 500)")],
    accuracy=[accuracy("imagenet", "ImageNet top-1 of an accuracy log (accuracy-imagenet.py)",
                       "Score an mlperf_log_accuracy.json against val_map.txt as the MLPerf reference script does "
                       "and print its line.", cmd_accuracy,
                       options=[opt("--val-map", type=Path, required=True, help="val_map.txt"),
                                opt("--dtype", default="float32", choices=DTYPE_CHOICES,
                                    help="response dtype (default: float32)")])],
)
register = COMMANDS.register
