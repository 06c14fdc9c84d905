"""The ``mlharness`` command. Thin: parses, calls the library, prints."""
# ruff: noqa: E402 - run as __main__, the start-up signal guard comes before the imports

from __future__ import annotations

import sys

if __name__ == "__main__":  # python -m mlharness.cli: signals handled before the imports below (seconds when busy)
    from mlharness import startup, supervise

    startup.guard()
    if not supervise.child():
        startup.announce(sys.argv[1:])  # what the command loads: before the imports, so within its first second
        if supervise.wanted(sys.argv[1:]):  # a command that commits results: run in a supervised child
            _status = supervise.supervise(sys.argv[1:])
            if _status is not None:
                startup.leave(_status)

import argparse
import logging
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from mlharness import __version__
from mlharness.errors import MLHarnessError
from mlharness.loadgen.interrupt import GUARD, Interrupted, handle_signals
from mlharness.manifest import hookguard
from mlharness.manifest.hookguard import hard_exit
from mlharness.progress import output_console

# piped (logs, CI): wide lines, tables sized to their content, emoji codes off (see output_console)
out = output_console()
err = output_console(stderr=True)


def _add_run_args(p: argparse.ArgumentParser) -> None:
    from mlharness.run.run_args import add_run_options

    add_run_options(p)  # the options every command that runs LoadGen shares (mlharness.run.run_args)
    p.add_argument("--loadgen-trace", action="store_true", help="also write LoadGen's per-sample trace "
                   "(mlperf_log_trace.json) at any --trace level: what a sweep point's goodput is computed from")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlharness", description="Benchmark any ML model under the MLPerf "
                                     "Inference rules with the official LoadGen.")
    parser.add_argument("--version", action="version", version=f"mlharness {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_args(sub.add_parser("run", help="run one LoadGen test (accuracy or performance)"))
    man = sub.add_parser("manifest", help="list, validate or start manifests").add_subparsers(dest="action",
                                                                                               required=True)
    man.add_parser("list", help="built-in manifests (runs no hook)").add_argument(
        "paths", nargs="*", type=Path, help="also list the manifests in these folders")
    v = man.add_parser("validate", help="schema, hook compilation, model and dataset paths (runs no hook)")
    v.add_argument("path")
    v.add_argument("--dataset-path", default=None)
    v.add_argument("--trust", action="store_true", help="also import model.generator / model.factory modules "
                   "that live beside the manifest (importing runs their code)")
    i = man.add_parser("init", help="write a commented manifest skeleton")
    i.add_argument("name")
    i.add_argument("--output", type=Path, default=None)
    from mlharness.manifest.publish import register as register_publish

    register_publish(man)  # show, search, cite, pack, unpack
    si = sub.add_parser("sysinfo", help="this host's system description (the fields a submission needs)")
    si.add_argument("--json", action="store_true", help="print the system description as JSON")
    si.add_argument("--overrides", type=Path, default=None, help="YAML of fields to set or correct")
    si.add_argument("--out", type=Path, default=None, help="write the system description JSON to this file")
    si.add_argument("--force", action="store_true", help="replace an existing --out file")
    _add_task_commands(sub)
    _add_group_commands(sub)
    return parser


# Command groups living beside their package: each module exposes ``register(subparsers)`` adding its parser(s)
# with ``set_defaults(func=handler)``; ``handler(args, console) -> int``. Heavy imports stay inside handlers.
GROUP_CLI_MODULES = ("mlharness.agent.cli", "mlharness.submission.cli", "mlharness.report.cli",
                     "mlharness.measurement.cli", "mlharness.measurement.replay", "mlharness.cluster.campaign_cli",
                     "mlharness.results_db.cli", "mlharness.cluster.cli", "mlharness.measurement.lowerbound_report")


def _add_group_commands(sub: argparse._SubParsersAction) -> None:
    import importlib

    for name in GROUP_CLI_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name not in (name, name.rpartition(".")[0]):
                raise
            continue
        module.register(sub)


def _add_task_commands(sub: argparse._SubParsersAction) -> None:
    """Each task's ``cli`` module (:func:`mlharness.tasks.cli_modules`) adds its `dataset synth|prepare <task>` and
    `accuracy <task>` commands through ``register(synth=..., prepare=..., accuracy=...)``: sub-parsers with
    ``set_defaults(func=handler)``, handlers taking (args, console) and returning an exit status. They import heavy
    libraries only inside handlers."""
    import importlib

    from mlharness.tasks import cli_modules

    ds = sub.add_parser("dataset", help="generate synthetic datasets, prepare real ones").add_subparsers(
        dest="action", required=True)
    synth = ds.add_parser("synth", help="write a synthetic dataset in the official layout").add_subparsers(
        dest="task", required=True)
    prepare = ds.add_parser("prepare", help="pre-process a real dataset").add_subparsers(dest="task", required=True)
    accuracy = sub.add_parser("accuracy", help="recompute accuracy from an mlperf_log_accuracy.json").add_subparsers(
        dest="task", required=True)
    for name in cli_modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        module.register(synth=synth, prepare=prepare, accuracy=accuracy)


def cmd_run(args: argparse.Namespace) -> int:
    from mlharness.progress import RunProgress
    from mlharness.rounds import get_round
    from mlharness.run.run_args import run_options
    from mlharness.run.runner import run

    get_round(args.round)  # an unknown round is refused before the model loads

    def stuck(e: BaseException, outdir: Path) -> None:
        # LoadGen has no way to stop a test early; after a failure it would keep issuing until min_duration.
        err.print(f"[bold red]error:[/] {escape(str(e))}\nThe run failed and LoadGen was still issuing queries, so "
                  f"mlharness stopped it. Partial output: {escape(str(outdir))}", highlight=False, soft_wrap=True)
        sys.stderr.flush()
        sys.stdout.flush()
        hard_exit(3)  # the real os._exit: hooks run with a refusing one

    opts = run_options(
        args, on_stuck_failure=stuck, loadgen_trace=getattr(args, "loadgen_trace", False),
        progress=RunProgress(err, live=not args.no_progress),  # --no-progress: the estimate line only
        say=lambda text: err.print(f"[dim]{escape(text)}[/]", highlight=False),
    )
    result = run(opts)
    from mlharness.results_db.at_commit import index_committed

    # its row in the evaluation database of the results root that holds it, now (none: --output outside it)
    index_committed(result.output, opts.results_root, say=lambda text: err.print(
        f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True))
    s = result.summary
    table = Table(show_header=False, box=None)
    md = result.metadata
    table.add_row("benchmark", f"{md['benchmark']} ({md['manifest']['name']})")
    table.add_row("scenario / mode", f"{s.scenario} / {md['mode']}")
    if md["mode"] == "performance":
        value = "n/a" if s.metric_value is None else f"{s.metric_value:,.2f} {s.metric_unit}"
        table.add_row(s.metric_name, value)
        from mlharness.kinds.tokens.report import latency_rows, token_rows

        for label, text in latency_rows(result.output) + token_rows(result.output,
                                                                    throughput=s.metric_unit != "tokens/s"):
            table.add_row(label, text)
        from mlharness.calibration.explain import explain_run

        # mlharness's verdict under the round's rules: LoadGen's, or VALID where the round waives early stopping
        exp = explain_run(result.output, s.scenario, md["conf_model"])
        table.add_row("result", "[red]INVALID[/]" if not exp.valid else "[green]VALID[/]" if not exp.waived else
                      "[green]VALID[/] (early stopping waived; LoadGen's line: INVALID)")
    else:
        table.add_row("result", "n/a in accuracy mode (LoadGen judges validity in performance mode)")
    if result.accuracy is not None:
        table.add_row("accuracy", result.accuracy.text.strip())
    from mlharness.kinds.registry import run_rows

    # what the run's data kind adds: a session run's sessions and turns, a pipeline's stages
    for label, text in run_rows(result.output):
        table.add_row(label, escape(text))
    from mlharness.telemetry.energy import energy_line

    energy = energy_line((md.get("telemetry") or {}).get("energy"))  # measured, or why not (RAPL, NVML)
    if energy:
        table.add_row("energy", escape(energy.removeprefix("energy: ")))
    table.add_row("output", str(result.output))
    if not md["submittable"]:
        table.add_row("submittable", "no: " + "; ".join(md["not_submittable_reasons"]))
    out.print(table)
    if md["mode"] == "performance":
        for line in exp.lines():
            out.print(escape(line), highlight=False)
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    from mlharness.manifest import commands

    if args.action == "list":
        return commands.list_manifests(out, args.paths)
    if args.action == "validate":
        return commands.validate(out, args.path, args.dataset_path, trust=args.trust)
    return commands.init(out, args.name, args.output)


def cmd_sysinfo(args: argparse.Namespace) -> int:
    from mlharness.submission.system import sysinfo_command

    return sysinfo_command(args, out)


def hook_overran(e: BaseException) -> None:
    """The hook watchdog's action: a hook past its deadline cannot be stopped (no thread can interrupt another),
    so the run's partial output is kept as *.failed-<time> and the process ends with exit status 3."""
    kept = GUARD.keep_all()
    GUARD.remove_scratch()  # tune's trial folders: no finally block runs after hard_exit
    err.print(f"[bold red]error:[/] {escape(str(e))}" + (f"\nPartial output: {escape(', '.join(kept))}" if kept
                                                         else ""), highlight=False, soft_wrap=True)
    sys.stderr.flush()
    sys.stdout.flush()
    hard_exit(3)


# commands whose SIGINT/SIGTERM stop LoadGen tests cleanly (exit 130/143, partial output kept)
SIGNAL_COMMANDS = ("run", "tune", "submission", "sweep", "replay")


def main(argv: list[str] | None = None) -> int:
    from mlharness import startup

    try:
        args = build_parser().parse_args(argv)  # imports each layer's commands: under the start-up guard
        startup.started()  # from here a signal is the command's: KeyboardInterrupt, or the handlers below
        from mlharness.agent.cli import quiet_grpc

        quiet_grpc(args.verbose)  # before anything imports grpc
        logging.basicConfig(level=logging.WARNING - 10 * min(args.verbose, 2),
                            format="%(levelname)s %(name)s: %(message)s")
        hookguard.on_overrun(hook_overran)
        handlers = {"run": cmd_run, "manifest": cmd_manifest, "sysinfo": cmd_sysinfo}
        with handle_signals(args.command in SIGNAL_COMMANDS):
            if hasattr(args, "func"):
                return args.func(args, out)
            return handlers[args.command](args)
    except MLHarnessError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        from mlharness.extras import missing_package

        # a package an extra brings, missing: the install's fault (2), also when found once the run had started
        return 2 if e.exit_code == 3 and missing_package(e) else e.exit_code
    except KeyboardInterrupt as e:  # also mlharness.loadgen.interrupt.Interrupted (SIGINT, SIGTERM)
        where = "; ".join(getattr(e, "__notes__", ()))  # the hook it stopped (mlharness.manifest.hookguard)
        err.print(f"[bold red]error:[/] {escape(str(e) or 'interrupted')}" + (f" ({escape(where)})" if where else ""),
                  highlight=False, soft_wrap=True)
        return getattr(e, "exit_code", 130)
    except Exception as e:  # a bug, shown with its traceback, unless a signal surfaced as it (inside an import)
        from mlharness.extras import hint_for_exception

        hint = hint_for_exception(e) if GUARD.signum is None else None
        if hint:  # an optional package this command needs is not installed: say which extra brings it
            err.print(f"[bold red]error:[/] {escape(str(e))}; {escape(hint)}", highlight=False, soft_wrap=True)
            return 2
        if GUARD.signum is None:
            raise
        err.print(f"[bold red]error:[/] {escape(str(Interrupted(GUARD.signum)))} ({type(e).__name__}: "
                  f"{escape(str(e))})", highlight=False, soft_wrap=True)
        return Interrupted(GUARD.signum).exit_code


if __name__ == "__main__":
    startup.leave(supervise.finish(main))
