"""``mlharness dataset synth coco`` and ``mlharness accuracy coco`` (heavy imports in the handlers)."""

from __future__ import annotations

import argparse
from typing import Any

from mlharness.tasks.detection.cli_common import detection_commands, run_accuracy


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.coco.synth import write_synthetic_coco

    out = write_synthetic_coco(args.out, args.count, args.seed, args.min_side, args.max_side)
    console.print(f"wrote {args.count} images and annotations/instances_val2017.json to {out}", highlight=False,
                  soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.coco.metric import CocoMapMetric

    return run_accuracy(args, CocoMapMetric())


_SYNTH_HELP = "a synthetic COCO 2017 validation set (val2017 JPEGs + annotations/instances_val2017.json)"

COMMANDS = detection_commands("coco", _SYNTH_HELP, "--coco-dir", "accuracy-coco.py", cmd_synth, cmd_accuracy)
register = COMMANDS.register
