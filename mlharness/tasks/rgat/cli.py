"""``mlharness dataset synth rgat`` and ``mlharness accuracy rgat``.

Kept light: numpy and torch are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import FORCE, Command, TaskCommands, accuracy, opt
from mlharness.tasks.generative_cli import print_result


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.errors import SettingsError
    from mlharness.tasks.rgat.synth import write_synthetic_igbh
    from mlharness.userfiles import check_free

    if not 10 <= args.papers <= 10_000_000 or not 1 <= args.classes <= 256 or not 1 <= args.dim <= 4096:
        raise SettingsError("--papers must be 10..10,000,000, --classes 1..256 (uint8 responses), --dim 1..4096")
    if not 0 < args.validation_frac <= 0.4:
        raise SettingsError("--validation-frac must be in (0, 0.4]: the first 60% of the papers are train_idx")
    check_free(args.out, args.force)
    write_synthetic_igbh(args.out, papers=args.papers, dim=args.dim, classes=args.classes, seed=args.seed,
                         validation_frac=args.validation_frac)
    n_val = int(args.papers * args.validation_frac)
    console.print(f"wrote a tiny IGBH ({args.papers} papers, {n_val} validation seeds) to {args.out}/tiny/processed",
                  highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.rgat.metric import IgbhAccuracyMetric

    ctx = AccuracyContext(dataset_path=args.dataset_path, count=0,
                          options={"dataset_size": args.dataset_size, "dtype": args.dtype})
    return print_result(IgbhAccuracyMetric().score(args.log, ctx))


COMMANDS = TaskCommands(
    # not synth(...): --seed comes after the set's own options
    synth=[Command("rgat", "a tiny IGBH heterogeneous graph in the reference's layout (rgat)",
                   "Write <out>/tiny/processed/ as graph/R-GAT/igbh.py reads it: six node types with node_feat.npy, "
                   "six edge types with edge_index.npy, the paper labels, train_idx.pt and val_idx.pt split as "
                   "tools/split_seeds.py does. rgat-oracle scores exactly 100% on it.", cmd_synth, (
        opt("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)"),
        opt("--papers", type=int, default=400, help="paper nodes (default: 400; IGBH-tiny has 100,000)"),
        opt("--dim", type=int, default=1024, help="features per node (default: 1024, as IGBH)"),
        opt("--classes", type=int, default=19, help="labels, at most 256 (default: 19)"),
        opt("--validation-frac", type=float, default=0.25, help="share of papers in val_idx (default: 0.25)"),
        opt("--seed", type=int, default=0),
        FORCE))],
    accuracy=[accuracy("rgat", "IGBH accuracy of an accuracy log (accuracy_igbh.py)",
                       "Score an mlperf_log_accuracy.json as graph/R-GAT/tools/accuracy_igbh.py does and print its "
                       "line.", cmd_accuracy, options=[
        opt("--dataset-path", type=Path, required=True, help="the IGBH root holding <size>/processed"),
        opt("--dataset-size", default="tiny", choices=("tiny", "small", "medium", "large", "full")),
        opt("--dtype", default="uint8", choices=("uint8", "float32", "int32", "int64"))])],
)
register = COMMANDS.register
