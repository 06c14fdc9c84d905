"""The tasks' command lines come from one mechanism: each task's ``cli.py`` states its commands as a table
(``mlharness/tasks/commands.py``), and the table's parsers are what users get."""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path

import pytest

from mlharness.tasks import cli_modules
from mlharness.tasks.commands import TaskCommands, accuracy, one_of, opt, prepare, synth

TASKS = Path(__file__).resolve().parents[1] / "mlharness" / "tasks"


@pytest.mark.parametrize("name", cli_modules())
def test_each_task_states_its_commands_as_a_table(name):
    """``register`` is the table's: a task that adds parsers by hand (``add_parser``/``add_argument``) fails."""
    module = importlib.import_module(name)
    assert isinstance(module.COMMANDS, TaskCommands)
    assert module.register == module.COMMANDS.register
    path = Path(module.__file__)
    calls = [node.func.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr in ("add_parser", "add_argument")]
    assert not calls, f"{path}: parsers built by hand ({', '.join(calls)}); state them in COMMANDS"


def _groups() -> tuple[argparse.ArgumentParser, dict[str, argparse._SubParsersAction]]:
    parser = argparse.ArgumentParser(prog="t")
    sub = parser.add_subparsers(dest="group", required=True)
    return parser, {g: sub.add_parser(g).add_subparsers(dest="task", required=True)
                    for g in ("synth", "prepare", "accuracy")}


def test_a_table_makes_the_parsers_it_states(tmp_path):
    def handler(args, console):
        return 0

    table = TaskCommands(
        synth=[synth("toy", "h", "d", handler, count=None, count_help="items (default: 3)",
                     options=[opt("--big", action="store_true")]),
               synth("bare", "h", None, handler, count=8, count_help="items", seed=False, force=None)],
        prepare=[prepare("toy", "h", "d", handler, options=[
            one_of(opt("--cases", type=Path), opt("--official", action="store_true"))])],
        accuracy=[accuracy("toy", "h", "d", handler, aliases=["toy-2"],
                           options=[opt("--dtype", default="int32", choices=("int32", "int64"))])])
    parser, groups = _groups()
    table.register(**groups)
    args = parser.parse_args(["synth", "toy", "--out", str(tmp_path), "--big"])
    assert (args.count, args.seed, args.big, args.force, args.func) == (None, 0, True, False, handler)
    args = parser.parse_args(["synth", "bare", "--out", str(tmp_path)])
    assert args.count == 8 and not hasattr(args, "seed") and not hasattr(args, "force")
    with pytest.raises(SystemExit):  # one of, not both
        parser.parse_args(["prepare", "toy", "--cases", "c.json", "--official"])
    args = parser.parse_args(["accuracy", "toy-2", "--log", "l.json", "--dtype", "int64"])
    assert (args.log, args.dtype, args.func) == (Path("l.json"), "int64", handler)
    with pytest.raises(SystemExit):  # --log is required
        parser.parse_args(["accuracy", "toy"])
