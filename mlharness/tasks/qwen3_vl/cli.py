"""``mlharness dataset synth qwen3-vl`` and ``mlharness accuracy qwen3-vl``.

Kept light: pyarrow, PIL, rapidfuzz and scikit-learn are imported inside the handlers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import FORCE, Command, TaskCommands, accuracy, opt
from mlharness.tasks.generative_cli import print_result, write_synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.qwen3_vl.synth import (
        DEFAULT_COUNT,
        INTERACTIVE_DEFAULT_COUNT,
        write_synthetic_qwen3_vl,
    )

    return write_synth(args, console, write_synthetic_qwen3_vl,
                       INTERACTIVE_DEFAULT_COUNT if args.interactive else DEFAULT_COUNT,
                       " to {out} (data/*.parquet)", interactive=args.interactive)


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.qwen3_vl.metric import score_log

    return print_result(score_log(args.log, args.dataset_path, args.seed, args.jobs))


COMMANDS = TaskCommands(
    # not synth(...): --interactive comes after --force
    synth=[Command("qwen3-vl", "a synthetic qwen3-vl-235b-a22b product catalogue (data/*.parquet)",
                   "Write data/train-00000-of-00001.parquet and data/test-00000-of-00001.parquet in the layout of "
                   "the Shopify/product-catalogue download (product images made locally, kept as encoded bytes); "
                   "with --interactive, the layout of the Interactive subset (nvidia/Shopify-product-catalogue-8k, "
                   "a train split only). The qwen3-vl-235b-a22b-oracle model scores f1 1.0 on it.", cmd_synth, (
        opt("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)"),
        opt("--count", type=int, default=None, help="number of products (default: 8; 6 with --interactive)"),
        opt("--seed", type=int, default=0),
        FORCE,
        opt("--interactive", action="store_true", help="the Interactive subset's layout")))],
    accuracy=[accuracy("qwen3-vl", "hierarchical F1 of a qwen3-vl-235b-a22b accuracy log (evaluation.py)",
                       "Score an mlperf_log_accuracy.json of UTF-8 text responses against a product-catalogue "
                       "folder as the official multimodal/qwen3-vl evaluation.py does, and print accuracy.txt.",
                       cmd_accuracy, options=[
        opt("--dataset-path", type=Path, required=True, help="the catalogue folder (data/*.parquet)"),
        opt("--seed", type=int, default=12345, help="the reference's random seed (default: 12345)"),
        opt("--jobs", type=int, default=None,
            help="the reference's chunk count (default: min(cpu count, 4)); only the random figures depend on it")])],
)
register = COMMANDS.register
