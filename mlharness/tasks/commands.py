"""A task's command lines as data: each task's ``cli.py`` states its ``dataset synth``, ``dataset prepare`` and
``accuracy`` commands in one :class:`TaskCommands` (their names, helps, options and handlers), and this module
turns the table into argparse sub-parsers. The options every command of a kind shares (a synthetic set's
``--out``, ``--count``, ``--seed`` and ``--force``; an accuracy command's ``--log``) are written once, here.

Kept light: no task module is imported until a handler runs, so ``mlharness --help`` stays fast.

    COMMANDS = TaskCommands(
        synth=[synth("imagenet", "a synthetic ImageNet validation set", "Write ...", cmd_synth, count=500,
                     count_help="number of images")],
        accuracy=[accuracy("imagenet", "ImageNet top-1 of an accuracy log", "Score ...", cmd_accuracy,
                           options=[opt("--val-map", type=Path, required=True, help="val_map.txt")])],
    )
    register = COMMANDS.register
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Handler = Callable[[Any, Any], int]  # (the parsed arguments, the console) -> exit status


@dataclass(frozen=True)
class Opt:
    """One option: what ``add_argument`` takes."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]


def opt(*flags: str, **kwargs: Any) -> Opt:
    return Opt(flags, kwargs)


@dataclass(frozen=True)
class OneOf:
    """Options of which at most one may be given (``required``: exactly one)."""

    options: tuple[Opt, ...]
    required: bool = False


def one_of(*options: Opt, required: bool = False) -> OneOf:
    return OneOf(options, required)


@dataclass(frozen=True)
class Command:
    """One sub-command: ``mlharness dataset synth NAME``, ``dataset prepare NAME`` or ``accuracy NAME``."""

    name: str
    help: str
    description: str | None
    run: Handler
    options: tuple[Opt | OneOf, ...] = ()
    aliases: tuple[str, ...] = ()  # other names of the command (``accuracy wan-2.2`` for ``accuracy wan22``)

    def add_to(self, group: Any) -> Any:
        p = group.add_parser(self.name, help=self.help, description=self.description, aliases=list(self.aliases))
        for item in self.options:
            if isinstance(item, OneOf):
                mx = p.add_mutually_exclusive_group(required=item.required)
                for o in item.options:
                    mx.add_argument(*o.flags, **o.kwargs)
            else:
                p.add_argument(*item.flags, **item.kwargs)
        p.set_defaults(func=self.run)
        return p


FORCE = opt("--force", action="store_true", help="write into a folder that already has files")


OUT_HELP = "folder to write (use it as --dataset-path)"


def synth(name: str, help: str, description: str, run: Handler, *,  # noqa: A002 - argparse's name
          count: int | None, count_help: str, out_help: str = OUT_HELP, seed: bool = True,
          options: Sequence[Opt | OneOf] = (), force: Opt | None = FORCE) -> Command:
    """A ``dataset synth`` command: ``--out``, ``--count`` (default ``count``; None lets the handler pick the
    writer's default), ``--seed`` (default 0) where the set has one, then the set's own ``options``, then
    ``--force`` (None: none)."""
    head = [opt("--out", type=Path, required=True, help=out_help),
            opt("--count", type=int, default=count, help=count_help)]
    if seed:
        head.append(opt("--seed", type=int, default=0))
    return Command(name, help, description, run, (*head, *options, *([force] if force is not None else [])))


def prepare(name: str, help: str, description: str, run: Handler, *,  # noqa: A002 - argparse's name
            options: Sequence[Opt | OneOf] = ()) -> Command:
    """A ``dataset prepare`` command: its options as the task states them."""
    return Command(name, help, description, run, tuple(options))


def accuracy(name: str, help: str, description: str | None, run: Handler, *,  # noqa: A002 - argparse's name
             log_help: str = "mlperf_log_accuracy.json", options: Sequence[Opt | OneOf] = (),
             aliases: Sequence[str] = ()) -> Command:
    """An ``accuracy`` command: ``--log`` (the accuracy log), then the task's own ``options``."""
    return Command(name, help, description, run, (opt("--log", type=Path, required=True, help=log_help), *options),
                   tuple(aliases))


@dataclass(frozen=True)
class TaskCommands:
    """A task's commands, by where they go."""

    synth: Sequence[Command] = field(default_factory=tuple)
    prepare: Sequence[Command] = field(default_factory=tuple)
    accuracy: Sequence[Command] = field(default_factory=tuple)

    def register(self, synth: Any, prepare: Any, accuracy: Any) -> None:
        """Adds the commands to the ``dataset synth``, ``dataset prepare`` and ``accuracy`` sub-parsers (what
        ``mlharness.cli`` calls for each task's ``cli`` module)."""
        for group, commands in ((synth, self.synth), (prepare, self.prepare), (accuracy, self.accuracy)):
            for command in commands:
                command.add_to(group)
