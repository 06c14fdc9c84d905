"""``mlharness dataset synth coco-captions`` and ``mlharness accuracy coco-t2i``.

Kept light: torch, numpy and Pillow are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, accuracy, opt, synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.coco_t2i.synth import write_synthetic_captions
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    networks = None
    if args.stand_in_networks:
        from mlharness.tasks.coco_t2i.networks import write_standin_networks

        networks = write_standin_networks(args.out / "networks", seed=args.seed).clip.parent
    out = write_synthetic_captions(args.out, count=args.count, seed=args.seed, networks=networks)
    extra = " with stand-in networks and their FID statistics" if networks else ""
    console.print(f"wrote {args.count} captions, the latent and the reference images{extra} to {out}",
                  highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.coco_t2i.metric import CocoT2IMetric

    options = {"captions": str(args.caption_path.resolve()), "statistics": str(args.statistics_path.resolve())}
    if args.networks:
        options["networks"] = str(args.networks.resolve())
    if args.image_shape:
        options["image_shape"] = list(args.image_shape)
    result = CocoT2IMetric().score(args.log, AccuracyContext(dataset_path=None, count=0, options=options))
    sys.stdout.write(result.text)  # exactly what accuracy.txt holds, as the official script prints it
    sys.stdout.flush()
    return 0


COMMANDS = TaskCommands(
    synth=[synth("coco-captions", "a synthetic COCO-2014 captions set (stable-diffusion-xl layout)",
                 "Write captions/captions.tsv, latents/latents.pt (one float32 (1, 4, 128, 128) latent) and the "
                 "1024x1024 reference images/ the stable-diffusion-xl-oracle model answers with.", cmd_synth,
                 count=10, count_help="number of captions (default: 10)", options=[
        opt("--stand-in-networks", action="store_true",
            help="also write random-weight CLIP and FID Inception networks to OUT/networks and the FID statistics "
                 "of the reference images under them (OUT/val2014.npz)")])],
    accuracy=[accuracy("coco-t2i", "CLIP score and FID of an image accuracy log (accuracy_coco.py)",
                       "Score an mlperf_log_accuracy.json of uint8 RGB images against the captions and the FID "
                       "statistics as the MLPerf reference script does and print its line (1024x1024 images); "
                       "images of another size are scored too, as not official.", cmd_accuracy, options=[
        opt("--caption-path", type=Path, required=True, help="captions.tsv"),
        opt("--statistics-path", type=Path, required=True, help="FID statistics (val2014.npz)"),
        opt("--networks", type=Path, default=None,
            help="folder with clip.pt and inception.pth to score with instead of the official weights"),
        opt("--image-shape", type=int, nargs=3, metavar=("HEIGHT", "WIDTH", "3"), default=None,
            help="the images' shape (default: the first image's size, 1024x1024 or a square)")])],
)
register = COMMANDS.register
