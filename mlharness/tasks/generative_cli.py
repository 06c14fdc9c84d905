"""The command-line pieces the token-stream task packages share: ``mlharness dataset synth NAME`` (``--out``,
``--count``, ``--seed``, ``--force``) and ``mlharness accuracy NAME`` (``--log``, the data file, ``--tokenizer``,
``--dtype``; ``--lcb-tests`` and ``--code-timeout`` where code is run). Light: the standard library only, so ``mlharness --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT_HELP = "folder to write (use it as --dataset-path)"
FORCE_HELP = "write into a folder that already has files"
TOKENIZER_HELP = "the model's checkpoint folder (its tokenizer)"


def add_synth(synth: Any, name: str, help: str, description: str, count_help: str, func: Callable[..., int],
              tokenizer_help: str | None = None) -> argparse.ArgumentParser:
    """The ``dataset synth NAME`` parser; ``--tokenizer`` (a checkpoint folder to encode with) when
    ``tokenizer_help`` is given."""
    p = synth.add_parser(name, help=help, description=description)
    p.add_argument("--out", type=Path, required=True, help=OUT_HELP)
    p.add_argument("--count", type=int, default=None, help=count_help)
    p.add_argument("--seed", type=int, default=0)
    if tokenizer_help is not None:
        p.add_argument("--tokenizer", type=Path, default=None, help=tokenizer_help)
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.set_defaults(func=func)
    return p


def add_accuracy(accuracy: Any, name: str, help: str, description: str, data_flag: str, data_help: str,
                 func: Callable[..., int], tokenizer_help: str = TOKENIZER_HELP,
                 dtype: bool = True) -> argparse.ArgumentParser:
    """The ``accuracy NAME`` parser: ``--log``, the data file (``data_flag``), ``--tokenizer`` and, with
    ``dtype``, ``--dtype``."""
    a = accuracy.add_parser(name, help=help, description=description)
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument(data_flag, type=Path, required=True, help=data_help)
    a.add_argument("--tokenizer", type=Path, required=True, help=tokenizer_help)
    if dtype:
        a.add_argument("--dtype", default="int32", choices=("int32", "int64"), help="response dtype (default: int32)")
    a.set_defaults(func=func)
    return a


def add_code_options(a: argparse.ArgumentParser, what: str) -> None:
    """``--lcb-tests`` and ``--code-timeout``: where LiveCodeBench's tests are, how long a test may run."""
    a.add_argument("--lcb-tests", type=Path, default=None,
                   help=f"JSON question_id -> LiveCodeBench tests, for {what} without an lcb_tests column")
    a.add_argument("--code-timeout", default="60", metavar="SECONDS",
                   help="seconds per LiveCodeBench test, a whole number from 1 to 3600 (default: 60)")
    a.add_argument("--allow-unisolated-code", action="store_true",
                   help="where no sandbox is available (bubblewrap with user namespaces), run generated code with "
                        "your own rights under resource limits only, instead of refusing")


def code_limits(args: argparse.Namespace) -> Any:
    """The sandbox's limits from ``--code-timeout`` and ``--allow-unisolated-code``."""
    from mlharness.tasks.deepseek_r1.sandbox import limits_from_options

    return limits_from_options({"code_timeout": args.code_timeout,
                                "allow_unisolated_code": bool(args.allow_unisolated_code)})


def write_synth(args: argparse.Namespace, console: Any, write: Callable[..., Path], default_count: int,
                what: str, **options: Any) -> int:
    """Write a synthetic set as ``dataset synth`` asked (``write(out, count=, seed=, **options)``) and say so;
    ``what`` names what it holds."""
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    count = args.count if args.count is not None else default_count
    out = write(args.out, count=count, seed=args.seed, **options)
    console.print(f"wrote {count} samples{what.format(out=out)}", highlight=False, soft_wrap=True)
    return 0


def print_result(result: Any) -> int:
    """Print an accuracy result's text: exactly what accuracy.txt holds."""
    sys.stdout.write(result.text)
    sys.stdout.flush()
    return 0
