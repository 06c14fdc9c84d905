"""The command-line pieces the token-stream task packages share, as rows of their command tables
(:mod:`mlharness.tasks.commands`): ``mlharness dataset synth NAME`` (``--out``, ``--count``, ``--seed``,
``--tokenizer``, ``--force``) and ``mlharness accuracy NAME`` (``--log``, the data file, ``--tokenizer``, ``--dtype``;
``--lcb-tests`` and ``--code-timeout`` where code is run), and what their handlers share. Light: the standard
library only, so ``mlharness --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import Command, Opt, accuracy, opt, synth

TOKENIZER_HELP = "the model's checkpoint folder (its tokenizer)"
DTYPE = opt("--dtype", default="int32", choices=("int32", "int64"), help="response dtype (default: int32)")


def token_synth(name: str, help: str, description: str, run: Callable[..., int], count_help: str,  # noqa: A002
                tokenizer_help: str | None = None) -> Command:
    """A token-stream set's ``dataset synth NAME``: ``--out``, ``--count`` (none given: the writer's default),
    ``--seed``, ``--tokenizer`` (a checkpoint folder to encode with) where ``tokenizer_help`` is given,
    ``--force``."""
    tokenizer = [opt("--tokenizer", type=Path, default=None, help=tokenizer_help)] if tokenizer_help else []
    return synth(name, help, description, run, count=None, count_help=count_help, options=tokenizer)


def token_accuracy(name: str, help: str, description: str, run: Callable[..., int], data: Opt,  # noqa: A002
                   tokenizer_help: str = TOKENIZER_HELP, dtype: bool = True, options: Sequence[Opt] = ()) -> Command:
    """A token-stream task's ``accuracy NAME``: ``--log``, the data file (``data``), ``--tokenizer``, ``--dtype``
    (with ``dtype``), then the task's own ``options``."""
    return accuracy(name, help, description, run, options=[
        data, opt("--tokenizer", type=Path, required=True, help=tokenizer_help), *([DTYPE] if dtype else []),
        *options])


def code_options(what: str) -> list[Opt]:
    """``--lcb-tests``, ``--code-timeout`` and ``--allow-unisolated-code``: where LiveCodeBench's tests are, how
    long a test may run, and whether generated code may run without a sandbox."""
    return [opt("--lcb-tests", type=Path, default=None,
                help=f"JSON question_id -> LiveCodeBench tests, for {what} without an lcb_tests column"),
            opt("--code-timeout", default="60", metavar="SECONDS",
                help="seconds per LiveCodeBench test, a whole number from 1 to 3600 (default: 60)"),
            opt("--allow-unisolated-code", action="store_true",
                help="where no sandbox is available (bubblewrap with user namespaces), run generated code with "
                     "your own rights under resource limits only, instead of refusing")]


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
