"""``mlharness submission run|package|check`` and ``mlharness audit verify``.

Kept light: the submission modules (and through them LoadGen, numpy, rich tables) are imported inside the
handlers, so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import shlex
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from mlharness.rounds import DEFAULT_ROUND, ROUNDS

DIVISIONS = ("open", "closed", "network")
DEV_FLAGS = (  # `mlharness run`'s development overrides: (flag, type)
    ("--min-duration-ms", int), ("--min-query-count", int), ("--max-query-count", int), ("--target-qps", float),
    ("--target-latency-ms", float), ("--samples-per-query", int), ("--performance-sample-count", int),
)  # fmt: skip
EXECUTION_FLAGS = (("--device", str), ("--max-batchsize", int), ("--server-max-wait-ms", float),
                   ("--threads", int), ("--workers", int), ("--load-workers", int))
AUDIT_TESTS = ("TEST01", "TEST04", "TEST05", "TEST06", "TEST07", "TEST08", "TEST09")
ROUND_HELP = (f"MLPerf Inference round ({', '.join(ROUNDS)}; default: {DEFAULT_ROUND}, the round of the pinned "
              f"LoadGen)")
DTYPES = ("byte", "float32", "int32", "int64")


RUN_FLAGS = ("--manifest", "--framework", "--round", "--dataset", "--dataset-path", "--user-conf", "--count",
             *(f for f, _ in DEV_FLAGS + EXECUTION_FLAGS), "--ignore-framework-version", "--no-second-try")
SWITCHES = ("ignore_framework_version", "no_second_try")  # flags without a value, passed to every run as given


def register(sub: argparse._SubParsersAction) -> None:
    from mlharness.run.run_args import add_run_options, manifest_default

    group = sub.add_parser("submission", help="submission-style result trees: run, package, check")
    actions = group.add_subparsers(dest="action", required=True)

    r = actions.add_parser("run", help="accuracy, performance and compliance runs of a benchmark, one LoadGen "
                                       "test per process, into a results tree")
    # the options every command that runs LoadGen shares (mlharness.run.run_args): same names and meanings as
    # on `run`, passed to every run; defaults of None where the runs' own apply (each run gets the flags given).
    # The development overrides make results not submittable in any division (the official checker's duration
    # rule applies to open results too).
    add_run_options(r, only=RUN_FLAGS, override={"--manifest": manifest_default("demo"),
                                                          "--round": {"default": DEFAULT_ROUND},
                                                          **{f: {"default": None} for f in ("--device", "--workers")}})
    r.add_argument("--scenarios", nargs="+", required=True, metavar="SCENARIO",
                   help="scenarios to run (a datacenter LLM: Offline plus Server, Interactive or both)")
    r.add_argument("--division", required=True, choices=DIVISIONS)
    r.add_argument("--submitter", required=True, help="organisation name (a directory name in the package)")
    r.add_argument("--system-name", default=os.environ.get("MLHARNESS_SYSTEM", "default"),
                   help="system description id: the systems/<name>.json of the package (default: $MLHARNESS_SYSTEM"
                        " or 'default')")
    r.add_argument("--results", type=Path, default=Path("results"), help="results tree (default: results)")
    r.add_argument("--resume", action="store_true", help="skip LoadGen tests whose results are complete and were "
                                                         "made with the same command and manifest")
    r.add_argument("--system-overrides", type=Path, default=None, help="YAML of system-description fields that "
                   "cannot be detected (status, system_type, cooling, ...); `mlharness submission "
                   "system-template` prints an example")
    r.add_argument("--extra-tests", nargs="+", default=[], choices=AUDIT_TESTS, help="audits to run beyond the "
                   "benchmark's required ones (TEST05 for older rounds)")
    r.add_argument("--compliance-dtype", default=None, choices=DTYPES, help="TEST01 compares the first "
                   "element of each response in this dtype (default: the manifest's response.element_type)")
    r.add_argument("--cluster", default=None, metavar="local|auto|ray://HOST:PORT", help="run the LoadGen tests "
                   "on an executor's nodes, independent ones at once: 'auto' (the Ray cluster RAY_ADDRESS names or "
                   "`mlharness cluster start` started; never another job's) or 'ray://HOST:PORT' (needs mlharness[cluster]); the tree stays here (docs/cluster.md)")
    r.add_argument("--constraints", default=None, metavar="KEY=VALUE,...", help="with --cluster: what a node needs "
                   "to run this benchmark (accelerator=GPU, accelerators=2, min_memory_gb=32, cpus=1, label.NAME=V, "
                   "framework.NAME=SPEC)")
    r.add_argument("--share-host", action="store_true", help="start each LoadGen test at once, even while another "
                   "run a submission or campaign started is running on the same host (by default each waits for "
                   "them: runs sharing a machine measure each other; docs/cluster.md)")
    r.set_defaults(func=cmd_run)

    p = actions.add_parser("package", help="a submission package: <division>/<submitter>/{src,systems,results} "
                                           "with truncated accuracy logs")
    p.add_argument("--results", type=Path, required=True, help="results tree made by `submission run`")
    p.add_argument("--out", type=Path, required=True, help="package root (a new or empty folder)")
    p.add_argument("--archive", type=Path, default=None, help="where the full accuracy logs are kept (default: "
                                                              "<out>-accuracy-logs beside the package)")
    p.add_argument("--system-overrides", type=Path, default=None, help="YAML of system-description fields, "
                                                                       "applied over those recorded by the runs")
    p.add_argument("--force", action="store_true", help="replace an existing package for this submitter")
    p.add_argument("--round", default=None, help=ROUND_HELP.replace(f"default: {DEFAULT_ROUND}", "default: the "
                   "round the results tree was made for") + " the package is for; runs carrying another round's "
                   "seeds are refused")
    p.set_defaults(func=cmd_package)

    c = actions.add_parser("check", help="check a submission package against the submission rules")
    c.add_argument("path", type=Path, help="package root (holding closed/, open/...) or a <division>/<submitter>")
    c.add_argument("--allow-development", action="store_true", help="short durations, small counts, partial "
                   "datasets and a failed performance comparison of runs that short are warnings instead of problems "
                   "(the development findings `submission run` reports without failing)")
    c.add_argument("--round", default=DEFAULT_ROUND, help=ROUND_HELP + " whose rules and seeds apply (the "
                   "official checker's --version)")
    c.set_defaults(func=cmd_check)

    t = actions.add_parser("system-template", help="print the system file: the system-description fields that "
                                                   "cannot be detected, for --system-overrides")
    t.set_defaults(func=cmd_system_template)

    audit = sub.add_parser("audit", help="compliance audits").add_subparsers(dest="action", required=True)
    v = audit.add_parser("verify", help="re-verify a compliance test of every scenario that ran it")
    v.add_argument("test", choices=AUDIT_TESTS)
    v.add_argument("--results", type=Path, required=True, help="results tree, or one scenario directory")
    v.add_argument("--dtype", default=None, choices=DTYPES, help="TEST01 response comparison dtype (default: "
                   "the response element type the accuracy run recorded)")
    v.set_defaults(func=cmd_audit_verify)


PATH_OPTIONS = ("dataset", "dataset_path", "user_conf", "system_overrides")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _manifest_ref(ref: str) -> str:
    """A manifest file made absolute; a built-in name left as it is."""
    return str(Path(ref).resolve()) if Path(ref).is_file() else str(ref)


def _reproduce(args: argparse.Namespace) -> str:
    """The submission run as one command line, with absolute paths, that redoes exactly these runs."""
    parts = ["mlharness", "submission", "run", "--manifest", _manifest_ref(args.manifest),
             "--scenarios", *args.scenarios, "--division", args.division, "--submitter", args.submitter,
             "--system-name", args.system_name, "--results", str(args.results.resolve()), "--round", args.round]
    options = ("framework", *PATH_OPTIONS, "count", *(_dest(f) for f, _ in DEV_FLAGS + EXECUTION_FLAGS))
    for name in options:
        value = getattr(args, name)
        if value is not None:
            parts += ["--" + name.replace("_", "-"), _abs(value) if name in PATH_OPTIONS else str(value)]
    if args.extra_tests:
        parts += ["--extra-tests", *args.extra_tests]
    if args.compliance_dtype:
        parts += ["--compliance-dtype", args.compliance_dtype]
    parts += ["--" + name.replace("_", "-") for name in SWITCHES if getattr(args, name)]
    return shlex.join(parts)


def _abs(value: Any) -> str:
    """A path made absolute when it names an existing file or folder (built-in names stay as they are)."""
    path = Path(str(value)).expanduser()
    return str(path.resolve()) if path.exists() else str(value)


def cmd_run(args: argparse.Namespace, console: Any) -> int:
    from mlharness.errors import AuditFailed
    from mlharness.loadgen.bounds import check_args
    from mlharness.loadgen.settings import validate_user_conf
    from mlharness.manifest.loader import split_reference
    from mlharness.manifest.names import check_path_component
    from mlharness.rounds import get_round
    from mlharness.submission.orchestrate import SubmissionRequest, run_submission

    check_path_component(args.submitter, "--submitter")  # both are folder names of the submission tree
    check_path_component(args.system_name, "--system-name")
    get_round(args.round)  # an unknown round is refused before the results tree is made
    check_args(args)  # every run's settings in range before the first one starts
    if args.user_conf is not None:
        validate_user_conf(args.user_conf, None)
    manifest, fw = split_reference(args.manifest)
    execution: list[str] = []
    for flag, _ in EXECUTION_FLAGS:
        value = getattr(args, _dest(flag))
        if value is not None:
            execution += [flag, str(value)]
    execution += ["--" + name.replace("_", "-") for name in SWITCHES if getattr(args, name)]
    req = SubmissionRequest(
        manifest=_manifest_ref(str(manifest)), scenarios=args.scenarios, division=args.division,
        submitter=args.submitter, system=args.system_name, results=args.results, resume=args.resume,
        framework=args.framework or fw, dataset=_abs(args.dataset) if args.dataset else None,
        dataset_path=_abs(args.dataset_path) if args.dataset_path else None, user_conf=args.user_conf,
        count=args.count, overrides={_dest(f): getattr(args, _dest(f)) for f, _ in DEV_FLAGS},
        execution=execution, extra_tests=args.extra_tests, system_overrides=args.system_overrides,
        dtype=args.compliance_dtype, command=_reproduce(args), round=args.round, share_host=args.share_host,
    )
    if args.constraints and not args.cluster:
        from mlharness.errors import SettingsError

        raise SettingsError("--constraints picks nodes of a cluster: give --cluster too")
    stop: Any = nullcontext()
    if args.cluster:
        from mlharness.cluster.executor import make_executor
        from mlharness.cluster.jobs import parse_constraints
        from mlharness.cluster.signals import cancel_on_signals
        from mlharness.submission.dispatch import RemoteSteps
        from mlharness.submission.layout import Tree

        constraints = parse_constraints(args.constraints)
        req.dispatch = RemoteSteps(make_executor(args.cluster), Tree(args.results), constraints, args.share_host)
        # SIGINT/SIGTERM stop every run on the nodes; what was placed stays, the command ends 130/143
        stop = cancel_on_signals(req.dispatch.executor)
    try:
        with stop:
            outcome = run_submission(req, console)
    finally:
        if req.dispatch is not None:
            req.dispatch.close()
    _print_rows(console, outcome.rows)
    console.print(f"{outcome.ran} LoadGen test(s) run, {outcome.skipped} skipped; results in "
                  f"{args.results.resolve()}", highlight=False, soft_wrap=True)
    if outcome.development:  # check --allow-development lists them as warnings: the chain goes on
        console.print(f"[yellow]{len(outcome.development)} development finding(s)[/] (not failures: `submission "
                      f"check --allow-development` tolerates them; the tree is not submittable)", highlight=False,
                      soft_wrap=True)
    if outcome.failed_audits:
        raise AuditFailed("compliance audit(s) failed: " + "; ".join(outcome.failed_audits))
    return 0


def _print_rows(console: Any, rows: list[dict[str, str]]) -> None:
    from rich.table import Table

    if not rows:
        return
    table = Table(title="results")
    columns = list(dict.fromkeys(k for row in rows for k in row))
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_colour(row.get(c, "-")) for c in columns))
    console.print(table)


def _colour(value: str) -> str:
    from rich.markup import escape

    return {"PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]"}.get(value, escape(value))


def cmd_package(args: argparse.Namespace, console: Any) -> int:
    from rich.markup import escape

    from mlharness.rounds import get_round
    from mlharness.submission.findings import shown
    from mlharness.submission.package import package

    if args.round is not None:
        get_round(args.round)  # an unknown round is refused before the tree is read
    report = package(args.results, args.out, args.archive, args.system_overrides, args.force, args.round)
    for note in report.notes:  # they name folders of the tree: printed escaped, as check prints names
        console.print(f"[yellow]note:[/] {escape(shown(note))}", highlight=False, soft_wrap=True)
    console.print(f"package: {escape(shown(report.submitter_dir))}\nfull accuracy logs: "
                  f"{escape(shown(report.archive))}\nround: {report.round} "
                  f"(check it with `mlharness submission check --round {report.round}`; the official checker: "
                  f"--version {report.round})", highlight=False, soft_wrap=True)
    return 0


def cmd_check(args: argparse.Namespace, console: Any) -> int:
    from mlharness.submission.checker import check, exit_status, print_report

    report = check(args.path, allow_development=args.allow_development, round_name=args.round)
    print_report(report, console)
    return exit_status(report)


def cmd_system_template(args: argparse.Namespace, console: Any) -> int:
    import sys

    from mlharness.submission.system import template_text

    sys.stdout.write(template_text())  # as it is: the YAML is meant for a file (> system.yaml)
    return 0


def cmd_audit_verify(args: argparse.Namespace, console: Any) -> int:
    from rich.markup import escape

    from mlharness.errors import AuditFailed, MLHarnessError
    from mlharness.submission.audits import find_audited, noise_note, verify_directory
    from mlharness.submission.checker_logs import development_finding

    dirs = find_audited(args.results, args.test)
    if not dirs:
        raise MLHarnessError(f"no scenario directory under {args.results} holds a {args.test} directory")
    failed = []
    for scen in dirs:
        verdicts = verify_directory(scen, args.test, args.dtype)
        for verdict in verdicts:
            colour = "green" if verdict.passed else "red"
            console.print(f"{escape(str(scen))}: {verdict.test} {verdict.check} [{colour}]{verdict.label}[/]"
                          + ("" if verdict.passed else f": {escape(verdict.reason)}"), highlight=False,
                          soft_wrap=True)
        # as `submission run` and `check --allow-development` take it: check's own rule
        finding = development_finding(args.test, [v.check for v in verdicts if not v.passed], scen / args.test)
        if finding:
            console.print(f"{escape(str(scen))}: [yellow]development finding[/]: {escape(finding)} (tolerated by "
                          f"`submission check --allow-development`; not submittable)", highlight=False,
                          soft_wrap=True)
            continue
        for verdict in (v for v in verdicts if not v.passed):
            failed.append(f"{scen} {verdict.check}")
            note = noise_note(scen, verdict)
            if note:
                console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if failed:
        raise AuditFailed(f"{args.test} failed: " + "; ".join(failed))
    return 0
