"""``mlharness report RESULTS_DIR [--html OUT] [--md OUT] [--compare OTHER_DIR]`` and
``mlharness report layers TRACE_JSON`` (also ``report PATH --layers``).

Kept light: matplotlib and the report modules are imported inside the handler."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="one page over every run of a results directory (HTML, Markdown); "
                                      "'report layers TRACE' for a per-layer breakdown",
                       description="Summarise every run found under RESULTS_DIR (any folder holding "
                       "mlperf_log_summary.txt): metric, VALID/INVALID and why, accuracy against the MLPerf "
                       "targets, compliance verdicts, latency percentiles, token latencies, non-submittable "
                       "settings, telemetry, load-sweep curves and figures. "
                       "'mlharness report layers TRACE_JSON' prints the per-operator breakdown of a trace "
                       "recorded with --trace framework.")
    p.add_argument("path", type=Path, help="results directory, submission tree (compliance verdicts included) or "
                   "sweep.json / a folder holding one (or 'layers' followed by a trace file)")
    p.add_argument("trace", type=Path, nargs="?", default=None, help=argparse.SUPPRESS)
    p.add_argument("--html", type=Path, default=None, metavar="OUT", help="write the report as one HTML page")
    p.add_argument("--md", type=Path, default=None, metavar="OUT", help="write the report as Markdown")
    p.add_argument("--force", action="store_true", help="replace existing --html/--md files")
    p.add_argument("--compare", type=Path, default=None, metavar="OTHER_DIR", help="put a second results "
                   "directory side by side, with ratios")
    p.add_argument("--query", default=None, metavar="QUERY", help="report only the runs of RESULTS_DIR this "
                   "query selects from the evaluation database, e.g. \"benchmark=resnet50 scenario=Offline valid\" "
                   "(fields: those of `mlharness results list`; see docs/cluster.md)")
    p.add_argument("--db", default=None, metavar="URL", help="with --query: a database URL instead of "
                   "RESULTS_DIR's mlharness_results.sqlite")
    p.add_argument("--layers", action="store_true", help="PATH is a trace file (or a run folder holding "
                   "mlharness_trace.json): print its per-layer breakdown")
    p.add_argument("--top", type=int, default=20, help="rows per per-layer table (default 20)")
    p.add_argument("--json", action="store_true", help="with --layers: print the breakdown as JSON")
    p.set_defaults(func=cmd_report)


def _trace_path(path: Path) -> Path:
    from mlharness.errors import MLHarnessError
    from mlharness.report.treefiles import present, shown

    if path.is_dir():
        path = path / "mlharness_trace.json"
    if not present(path, "the trace"):
        raise MLHarnessError(f"no trace at {shown(path)}: record one with `mlharness run ... --trace framework`")
    return path


def cmd_layers(path: Path, top: int, as_json: bool, console: Any) -> int:
    from rich.markup import escape as markup_escape
    from rich.table import Table

    from mlharness.report.treefiles import printable

    def escape(text: str) -> str:  # operator names from the trace: no markup, no control characters
        return markup_escape(printable(text))

    from mlharness.report.render import trace_events
    from mlharness.telemetry.breakdown import layer_breakdown, summary_lines

    b = layer_breakdown(trace_events(_trace_path(path)))
    if as_json:
        print(json.dumps(b.to_dict(), indent=2))
        return 0
    for title, rows in (("operators by type", b.by_type), ("operators by layer (type and input shapes)",
                                                           b.by_layer)):
        table = Table("operator", "count", "total ms", "mean us", "share", title=title, title_justify="left")
        for r in rows[:top]:
            table.add_row(escape(r.key), str(r.count), f"{r.total_us / 1000:.3f}", f"{r.mean_us:.1f}",
                          f"{100 * r.share:.1f}%")
        if len(rows) > top:
            rest = rows[top:]
            table.add_row(f"({len(rest)} more)", str(sum(r.count for r in rest)),
                          f"{sum(r.total_us for r in rest) / 1000:.3f}", "",
                          f"{100 * sum(r.share for r in rest):.1f}%")
        console.print(table)
    for line in summary_lines(b):
        console.print(escape(line), highlight=False)
    return 0


def _write(path: Path, text: str) -> None:
    """Write a report file atomically, with the mode of any new file (0666 less the umask, 0644 usually)."""
    from mlharness.userfiles import replace_text

    replace_text(path, text)


def cmd_report(args: argparse.Namespace, console: Any) -> int:
    from rich.markup import escape as markup_escape
    from rich.table import Table

    from mlharness.report.treefiles import printable

    def escape(text: str) -> str:  # values from the tree: no markup, no control characters
        return markup_escape(printable(text))

    from mlharness.errors import MLHarnessError
    from mlharness.report import render

    if args.trace is not None:
        if str(args.path) != "layers":
            raise MLHarnessError(f"unexpected argument {args.trace}: use `mlharness report layers "
                                 "TRACE_JSON` or `mlharness report RESULTS_DIR`")
        return cmd_layers(args.trace, args.top, args.json, console)
    if args.layers:
        return cmd_layers(args.path, args.top, args.json, console)
    from mlharness.report.treefiles import check_output

    for path in (args.md, args.html):
        if path is not None:
            check_output(path, args.force)
    only = None
    if args.query is not None:
        from mlharness.results_db.store import query_folders

        args.path, only = query_folders(args.path, args.db, args.query)
    report = render.build(args.path, args.compare, only=only)
    if args.md is not None:
        _write(args.md, render.markdown(report))
    if args.html is not None:
        from mlharness.report import html

        _write(args.html, html.render(report))
    # the terminal gets the essentials; the files carry every column
    for line in render.host_lines(report):
        console.print(escape(line), highlight=False)
    if report.sweep is not None:
        from mlharness.report import sweep

        points = Table(*sweep.COLUMNS[:7], title=f"sweep {escape(str(report.sweep.path))}", title_justify="left")
        for cells in sweep.rows(report.sweep):
            style = "green" if cells[3].startswith("VALID") else "red"
            points.add_row(*(escape(c) for c in cells[:3]), f"[{style}]{escape(cells[3])}[/]",
                           *(escape(c) for c in cells[4:7]))
        console.print(points)
        for line in sweep.facts(report.sweep):
            console.print(escape(line), highlight=False)
    table = Table("run", "scenario", "mode", "batch", "value", "result", "accuracy", "p99 (ms)")
    for r in report.runs:
        cells = dict(zip(render.COLUMNS, render.row(r), strict=True))
        result = cells["result"]
        ok = r.result == "VALID" and all(v.passed is True for v in r.verdicts)  # VALID, or waived: the round's
        styled = f"[green]{escape(result)}[/]" if ok else f"[red]{escape(result)}[/]" if result else ""
        acc = " ".join(x for x in (cells["accuracy"], cells["target"]) if x)
        table.add_row(escape(r.rel), escape(cells["scenario"]), escape(cells["mode"]), cells["batch"],
                      escape(cells["value"]), styled, escape(acc), cells["p99 (ms)"])
    if report.runs:
        console.print(table)
    from mlharness.report.campaign import side_by_side

    systems = side_by_side(report.root, report.runs)  # a campaign's results: one row per system and node
    if systems and systems[1]:
        by_system = Table(*systems[0], title="systems side by side", title_justify="left")
        for cells in systems[1]:
            by_system.add_row(*(escape(c) for c in cells))
        console.print(by_system)
    for v in report.verdicts:
        style = "green" if v.passed else "red"
        console.print(f"{escape(v.rel)}: [{style}]{escape(v.summary())}[/]", highlight=False)
    if report.other is not None:
        rows, only_a, only_b = render.compare_rows(report)
        cmp = Table(*render.COMPARE_COLUMNS, title=f"compared with {escape(str(args.compare))}",
                    title_justify="left")
        for r in rows:
            cmp.add_row(*(escape(c) for c in r))
        console.print(cmp)
        for r in only_a:
            console.print(f"only in {escape(str(args.path))}: {escape(r.rel)}", highlight=False)
        for r in only_b:
            console.print(f"only in {escape(str(args.compare))}: {escape(r.rel)}", highlight=False)
    for what, out in (("HTML", args.html), ("Markdown", args.md)):
        if out is not None:
            console.print(f"wrote {what} report {escape(str(out))}", highlight=False)
    return 0
