"""``mlharness campaign run|plan FILE``: a campaign file's runs on this machine or a Ray cluster.

Kept light: the executor (and Ray) is imported inside the handlers, so ``mlharness --help`` stays fast."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

CLUSTER_HELP = ("where the runs go: 'local' (this machine, one run at a time; the default), 'auto' (the Ray "
                "cluster RAY_ADDRESS names or `mlharness cluster start` started, else this machine) or "
                "'ray://HOST:PORT' (needs mlharness[cluster])")


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("campaign", help="models × scenarios × modes × systems from a YAML file, run on this "
                                            "machine or spread over a Ray cluster")
    actions = group.add_subparsers(dest="action", required=True)
    r = actions.add_parser("run", help="run every job of a campaign file; results in one tree with campaign.json")
    r.add_argument("file", type=Path, help="the campaign file (docs/cluster.md, 'Campaigns')")
    r.add_argument("--cluster", default=None, metavar="local|auto|ray://HOST:PORT", help=CLUSTER_HELP)
    r.add_argument("--results", type=Path, default=Path("results"), help="results root (default: results)")
    r.add_argument("--resume", action="store_true", help="skip every job whose run folder is complete; run the "
                                                         "failed and missing ones")
    r.add_argument("--accept-changed", action="store_true",
                   help="with --resume: keep finished runs made with other run options or another version of "
                        "the manifest than the campaign now asks (refused by default, naming them)")
    r.add_argument("--share-host", action="store_true",
                   help="start each run at once, even while another run a campaign or submission started is "
                        "running on the same physical host (several Ray nodes on one machine); by default each "
                        "waits for them, since runs sharing a machine measure each other (docs/cluster.md)")
    r.set_defaults(func=cmd_run)
    p = actions.add_parser("plan", help="print a campaign's jobs and the nodes each system matches, run nothing")
    p.add_argument("file", type=Path)
    p.add_argument("--cluster", default=None, metavar="local|auto|ray://HOST:PORT", help=CLUSTER_HELP)
    p.set_defaults(func=cmd_plan)


def _plan(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from mlharness.cluster.campaign import expand, read_record
    from mlharness.cluster.campaign_file import load_campaign
    from mlharness.cluster.executor import make_executor

    spec = load_campaign(args.file)  # a malformed file is refused before any cluster is touched
    executor = make_executor(args.cluster)
    # a resumed campaign keeps the jobs it pinned to nodes that are gone since (reported, not rerun)
    earlier = read_record(args.results.resolve()) if getattr(args, "resume", False) else None
    try:
        return spec, executor, expand(spec, executor, args.file.resolve().parent, args.file, earlier,
                                      share_host=getattr(args, "share_host", False))
    except BaseException:
        executor.close()
        raise


def cmd_plan(args: argparse.Namespace, console: Any) -> int:
    from rich.markup import escape
    from rich.table import Table

    spec, executor, plan = _plan(args)
    try:
        for name, nodes in plan.systems.items():
            console.print(f"system {escape(name)}: {len(nodes)} matching node(s): "
                          f"{escape(', '.join(n.short() for n in nodes))}", highlight=False, soft_wrap=True)
        table = Table("job", "command", "constraints", title=f"{len(plan.jobs)} run(s)", title_justify="left")
        for job in plan.jobs:
            table.add_row(escape(job.key), escape(" ".join(job.argv)), escape(job.constraints.describe()))
        console.print(table)
    finally:
        executor.close()
    return 0


def result_text(folder: Path | None) -> str:
    """The finished run's headline (VALID/INVALID and metric, or its accuracy line)."""
    from mlharness.errors import MLHarnessError
    from mlharness.report.campaign import figure
    from mlharness.report.collect import read_run

    if folder is None or not (folder / "mlperf_log_summary.txt").is_file():
        return "-"
    try:
        return figure(read_run(folder / "mlperf_log_summary.txt", folder))
    except MLHarnessError:
        return "-"


def resume_command(args: argparse.Namespace) -> str:
    """The command that runs what this one did not finish: the same campaign, results and cluster, --resume."""
    import shlex

    argv = ["mlharness", "campaign", "run", str(args.file), "--results", str(args.results)]
    if args.cluster:
        argv += ["--cluster", args.cluster]
    argv += [flag for flag, on in (("--accept-changed", args.accept_changed), ("--share-host", args.share_host)) if on]
    return shlex.join([*argv, "--resume"])


def cmd_run(args: argparse.Namespace, console: Any) -> int:
    from rich.markup import escape
    from rich.table import Table

    from mlharness.cluster.campaign import NODE_GONE, run_campaign
    from mlharness.cluster.signals import Cancelled, cancel_on_signals
    from mlharness.errors import RunFailed

    spec, executor, plan = _plan(args)
    root = args.results.resolve()
    console.print(f"campaign {escape(str(args.file))}: {len(plan.jobs)} run(s) on the {executor.name} executor "
                  f"({len(executor.nodes())} node(s)); results in {escape(str(root))}", highlight=False,
                  soft_wrap=True)

    def done(outcome: Any) -> None:
        where = outcome.node.short() if outcome.node else "?"
        mark = "[green]✓[/]" if outcome.ok else "[red]✗[/]"
        console.print(f"{mark} {escape(outcome.job.key)} on {escape(where)}"
                      + ("" if outcome.ok else f": {escape(str(outcome.error))}"), highlight=False, soft_wrap=True)

    outcomes: list[Any] = []
    stopped: Cancelled | None = None
    try:  # SIGINT/SIGTERM stop every run in flight; what finished is recorded, the stopped ones as cancelled
        with cancel_on_signals(executor):
            outcomes = run_campaign(plan, executor, root, args.file.resolve(), args.resume, done,
                                    accept_changed=args.accept_changed)
    except Cancelled as e:
        stopped = e
    finally:
        executor.close()
    table = Table("job", "node", "outcome", "result", title=f"campaign {escape(str(args.file))}",
                  title_justify="left")
    for o in outcomes:
        gone = o.job.key in plan.gone and not o.ok
        state = ("[dim]skipped (complete)[/]" if o.skipped else "[green]ok[/]" if o.ok else
                 f"[yellow]{NODE_GONE}[/]" if gone else "[yellow]cancelled[/]" if o.cancelled else
                 "[red]lost[/]" if o.lost else "[red]failed[/]")
        node = o.node.short() if o.node else "-"
        table.add_row(escape(o.job.key), escape(node), state, escape(result_text(o.folder) if o.ok else
                                                                     str(o.error)))
    console.print(table)
    lost = [o for o in outcomes if not o.ok and o.job.key in plan.gone]
    failed = [o for o in outcomes if not o.ok and o.job.key not in plan.gone]
    unfinished = [o for o in failed if o.lost]  # the cluster's head was lost before they came back
    ran = sum(1 for o in outcomes if not o.skipped and o not in lost)
    console.print(f"{ran} run(s), {len(outcomes) - ran - len(lost)} skipped, {len(failed) - len(unfinished)} failed"
                  + (f", {len(unfinished)} not finished (the cluster's head was lost)" if unfinished else "")
                  + (f", {len(lost)} not rerun (their node is gone)" if lost else "")
                  + f"; record in {escape(str(root / 'campaign.json'))}", highlight=False, soft_wrap=True)
    resume = resume_command(args)
    if failed and stopped is None:
        console.print(f"resume: {escape(resume)}" + (" (with --cluster naming a cluster that is up)" if unfinished
                                                       else ""), highlight=False, soft_wrap=True)
    if stopped is not None:
        raise stopped
    if unfinished:
        head = getattr(executor, "lost", None) or "the Ray head stopped answering"
        raise RunFailed(f"{head}: {len(unfinished)} run(s) of the campaign did not finish (recorded 'lost' in "
                        f"{root / 'campaign.json'}), {len(outcomes) - len(failed) - len(lost)} finished and kept"
                        + (f", {len(failed) - len(unfinished)} failed" if len(failed) > len(unfinished) else "")
                        + f"; once a cluster is up, `{resume}` runs what did not finish and nothing that did")
    if failed:
        raise RunFailed(f"{len(failed)} run(s) of the campaign failed: " + "; ".join(
            f"{o.job.key} ({o.error})" for o in failed) + f"; `{resume}` runs them again")
    return 0
