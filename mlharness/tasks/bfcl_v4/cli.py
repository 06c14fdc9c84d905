"""``mlharness dataset synth bfcl-v4`` and ``mlharness accuracy bfcl-v4``.

Kept light: the task's modules are imported inside the handlers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import Command, TaskCommands, opt, synth
from mlharness.tasks.generative_cli import print_result, write_synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.bfcl_v4.synth import DEFAULT_COUNT, write_synthetic_bfcl_v4

    return write_synth(args, console, write_synthetic_bfcl_v4, DEFAULT_COUNT, " per subset to {out}")


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    if args.setup:
        from rich.markup import escape

        from mlharness.tasks.bfcl_v4.env import setup

        python = setup(args.venv, say=lambda line: console.print(escape(line), highlight=False))
        console.print(escape(f"bfcl-eval's environment is ready: {python}"), highlight=False)
        if args.log is None:
            return 0
    if args.log is None:
        from mlharness.errors import SettingsError

        raise SettingsError("mlharness accuracy bfcl-v4: give --log (an accuracy log to score), --setup, or both")
    from mlharness.tasks.bfcl_v4.metric import score_log

    return print_result(score_log(args.log, args.dataset_path, "all" if args.all else "mlperf", args.bfcl_python))


COMMANDS = TaskCommands(
    synth=[synth("bfcl-v4", "a synthetic BFCL v4 single-turn set (BFCL_v4_<subset>.json)",
                 "Write BFCL_v4_<subset>.json and possible_answer/BFCL_v4_<subset>.json for the twelve subsets of "
                 "the MLPerf selection, in the layout bfcl-eval ships its data in. The oracle scores 100 on it.",
                 cmd_synth, count=None, count_help="entries per subset (default: 3)")],
    # not accuracy(...): --log is optional here (--setup alone makes the environment)
    accuracy=[Command("bfcl-v4", "BFCL v4 accuracy of a qwen3.6-27b session accuracy log",
                      "Score an mlperf_log_accuracy.json of session answers as the MLCommons endpoints reference's "
                      "BFCLv4Scorer does, with bfcl-eval's AST checker run in its own environment (--bfcl-python, "
                      "else MLHARNESS_BFCL_PYTHON, else the one --setup makes in mlharness's cache), and print "
                      "accuracy.txt. --setup makes that environment (pinned bfcl-eval, from PyPI).", cmd_accuracy, (
        opt("--log", type=Path, default=None, help="mlperf_log_accuracy.json"),
        opt("--setup", action="store_true",
            help="make bfcl-eval's environment (a virtual environment with the pinned bfcl-eval and what its AST "
                 "checker imports; downloads, minutes) where runs find it by themselves"),
        opt("--venv", type=Path, default=None,
            help="with --setup: the folder to make it in (default: <mlharness cache>/bfcl-eval-<version>; "
                 "elsewhere, point MLHARNESS_BFCL_PYTHON at its bin/python)"),
        opt("--dataset-path", type=Path, default=None,
            help="a folder of BFCL_v4_<subset>.json files (default: bfcl-eval's own data)"),
        opt("--all", action="store_true", help="score against every entry, not the MLPerf selection"),
        opt("--bfcl-python", default=None, help="bfcl-eval's Python (default: $MLHARNESS_BFCL_PYTHON)")))],
)
register = COMMANDS.register
