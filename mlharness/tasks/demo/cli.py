"""``mlharness dataset synth demo``: the demo's colour-patch images written into a folder of the user's choice.

Kept light: Pillow and numpy are imported inside the handler so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("demo", help="the demo's synthetic images (JPEGs + val_map.txt)",
                         description="Write the demo's colour-patch images in the ImageNet validation layout; "
                                     "the demo model scores exactly 100% top-1 on them. A run of the demo without "
                                     "--dataset-path generates them in the cache by itself.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=256, help="number of images (default: 256)")
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.demo.dataset import ensure_demo_dataset
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    out = ensure_demo_dataset(args.out, count=args.count)
    console.print(f"wrote {args.count} demo images and val_map.txt to {out}", highlight=False, soft_wrap=True)
    return 0
