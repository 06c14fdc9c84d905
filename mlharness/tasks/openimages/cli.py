"""``mlharness dataset synth openimages`` and ``mlharness accuracy openimages`` (heavy imports in the handlers)."""

from __future__ import annotations

import argparse
from typing import Any

from mlharness.tasks.detection.cli_common import detection_commands, run_accuracy


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.openimages.synth import write_synthetic_openimages

    out = write_synthetic_openimages(args.out, args.count, args.seed, args.min_side, args.max_side)
    console.print(f"wrote {args.count} images and annotations/openimages-mlperf.json to {out}", highlight=False,
                  soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.openimages.metric import OpenImagesMapMetric

    return run_accuracy(args, OpenImagesMapMetric())


_SYNTH_HELP = "a synthetic OpenImages MLPerf set (validation/data JPEGs + annotations/openimages-mlperf.json)"

COMMANDS = detection_commands("openimages", _SYNTH_HELP, "--openimages-dir", "accuracy-openimages.py", cmd_synth, cmd_accuracy)
register = COMMANDS.register
