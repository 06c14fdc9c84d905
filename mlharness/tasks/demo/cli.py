"""``mlharness dataset synth demo``: the demo's colour-patch images written into a folder of the user's choice.

Kept light: Pillow and numpy are imported inside the handler so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from mlharness.tasks.commands import TaskCommands, synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.demo.dataset import ensure_demo_dataset
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    out = ensure_demo_dataset(args.out, count=args.count)
    console.print(f"wrote {args.count} demo images and val_map.txt to {out}", highlight=False, soft_wrap=True)
    return 0


COMMANDS = TaskCommands(
    synth=[synth("demo", "the demo's synthetic images (JPEGs + val_map.txt)",
                 "Write the demo's colour-patch images in the ImageNet validation layout; the demo model scores "
                 "exactly 100% top-1 on them. A run of the demo without --dataset-path generates them in the cache "
                 "by itself.", cmd_synth, count=256, count_help="number of images (default: 256)", seed=False)],
)
register = COMMANDS.register
