"""``mlharness results list|best|history|index|upgrade [ROOT] [--db URL]``: the evaluation database of a results
root (or a server's), queried across runs. Kept light: SQLAlchemy is imported inside the handlers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

FILTER_FLAGS = ("benchmark", "scenario", "mode", "system", "framework", "round", "model", "manifest", "node",
                "host", "kind", "test", "label")
COLUMNS = ("started (UTC)", "system", "benchmark", "scenario", "mode", "result", "metric", "accuracy", "node",
           "folder")


def _common(p: argparse.ArgumentParser, filters: bool = True) -> None:
    p.add_argument("root", type=Path, nargs="?", default=None, help="the results root (default: ./results; "
                   "with --db, optional: without it the whole database is queried)")
    p.add_argument("--db", default=None, metavar="URL", help="a database URL instead of the root's "
                   "mlharness_results.sqlite, e.g. postgresql+psycopg://USER@HOST:5432/results "
                   "(pip install 'mlharness[postgres]'); the same schema, migrated on open")
    if not filters:
        return
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the answer as JSON")
    out.add_argument("--csv", action="store_true", help="print the runs as CSV (every column of the database, "
                     "a header line first)")
    p.add_argument("--no-index", action="store_true", help="query what is indexed without looking at the "
                   "root's folders first")
    g = p.add_argument_group("filters (each may repeat or list values with commas: any of them matches)")
    for name in FILTER_FLAGS:
        g.add_argument(f"--{name}", action="append", default=None, metavar="VALUE")
    v = g.add_mutually_exclusive_group()
    v.add_argument("--valid", dest="valid", action="store_const", const=True, default=None,
                   help="VALID performance runs only")
    v.add_argument("--invalid", dest="valid", action="store_const", const=False, help="INVALID runs only")
    g.add_argument("--since", default=None, metavar="DATE", help="runs started at or after DATE (2026-05-01 or "
                   "2026-05-01T12:00, UTC)")
    g.add_argument("--until", default=None, metavar="DATE", help="runs started at or before DATE (a date: "
                   "that whole day)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("results", help="query every run of a results root (or a shared database): filters, the "
                       "best VALID result per system, one figure's history",
                       description="The evaluation database: every run folder under ROOT indexed into "
                       "ROOT/mlharness_results.sqlite (incrementally: unchanged folders are not read again), or "
                       "into the database --db names. Queries index the root first.")
    acts = p.add_subparsers(dest="action", required=True)
    ls = acts.add_parser("list", help="the runs a filter selects, oldest first")
    _common(ls)
    ls.set_defaults(func=cmd_list)
    b = acts.add_parser("best", help="the best VALID performance result per system (per benchmark and scenario): "
                        "the lowest latency or the highest throughput")
    _common(b)
    b.set_defaults(func=cmd_best)
    h = acts.add_parser("history", help="one figure of every matching run, in the order they ran, or of each "
                        "mlharness commit that made them (--by commit)")
    h.add_argument("metric", help="'metric' (the scenario's figure), a short name (p50, p99, p99.9, ttft_p99, "
                   "tpot_p99, tokens_per_s, samples_per_s, accuracy, sessions.sessions_per_s) or a line of "
                   "LoadGen's summary, e.g. '99.00 percentile latency (ns)'")
    h.add_argument("--by", choices=("run", "commit"), default="run", help="commit: one row per mlharness commit "
                   "(the median of its runs), in the order each was first measured (default: run)")
    h.add_argument("--last", type=int, default=None, metavar="N", help="only the last N rows (runs or commits)")
    _common(h)
    h.set_defaults(func=cmd_history)
    ix = acts.add_parser("index", help="index ROOT now (what every query does first)")
    _common(ix, filters=False)
    ix.set_defaults(func=cmd_index)
    up = acts.add_parser("upgrade", help="bring the database's schema to this version's (done on every open)")
    _common(up, filters=False)
    up.set_defaults(func=cmd_upgrade)


def _escape(text: Any) -> str:
    from rich.markup import escape

    from mlharness.report.treefiles import printable

    return escape(printable("" if text is None else str(text)))


def _value(value: float | None, unit: str | None) -> str:
    from mlharness.report import units

    if value is None:
        return ""
    if unit == "ns":
        return f"{units.ms_from_ns(value)} ms"
    return f"{units.number(value)} {unit or ''}".strip()


def run_dict(run: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    from mlharness.results_db.models import Run

    out = {c.key: getattr(run, c.key) for c in Run.__table__.columns}
    for k in ("started_at", "finished_at", "indexed_at"):
        out[k] = out[k].isoformat() if out[k] is not None else None
    return {**out, **(extra or {})}


def _row(run: Any) -> list[str]:
    started = run.started_at.strftime("%Y-%m-%d %H:%M:%S") if run.started_at else ""
    result = {"VALID": "[green]VALID[/]", "INVALID": "[red]INVALID[/]"}.get(run.validity, run.validity)
    if run.waived:  # the round's rules waive what LoadGen's line failed it for
        result += " (early stopping waived)"
    return [started, _escape(run.system), _escape(run.benchmark), _escape(run.scenario),
            _escape(run.mode) + (f" {_escape(run.compliance_test)}" if run.compliance_test else ""), result,
            _escape(_value(run.metric_value, run.metric_unit)), _escape(run.accuracy_text or (
                f"{run.accuracy_value:g}" if run.accuracy_value is not None else "")),
            _escape(run.node_id[:12] if run.node_id else run.host), _escape(run.folder)]


def _open(args: argparse.Namespace, console: Any) -> Any:
    from mlharness.results_db.store import open_store

    store = open_store(args.root, args.db, refresh=not getattr(args, "no_index", False))
    if store.indexed is not None and (store.indexed.added or store.indexed.updated or store.indexed.removed
                                      or store.indexed.errors):
        _say_indexed(store.indexed, console, args)
    return store


def _say_indexed(done: Any, console: Any, args: argparse.Namespace) -> None:
    from rich.console import Console

    out = Console(stderr=True) if getattr(args, "json", False) or getattr(args, "csv", False) else console
    out.print(_escape(done.line()), highlight=False)
    for e in done.errors:
        out.print(f"[yellow]not indexed:[/] {_escape(e)}", highlight=False)


def _print_runs(runs: list[Any], title: str, args: argparse.Namespace, console: Any) -> int:
    from rich.table import Table

    if args.json:
        print(json.dumps([run_dict(r) for r in runs], indent=2))
        return 0
    if getattr(args, "csv", False):
        _print_csv([run_dict(r) for r in runs])
        return 0
    table = Table(*COLUMNS, title=_escape(title), title_justify="left")
    for r in runs:
        table.add_row(*_row(r))
    console.print(table)
    return 0


def _print_csv(rows: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> None:
    import csv
    import sys

    from mlharness.results_db.models import Run

    names = [c.key for c in Run.__table__.columns] + list(extra)
    writer = csv.DictWriter(sys.stdout, fieldnames=names, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:  # a cell a spreadsheet would run as a formula is quoted as text
        writer.writerow({k: ("'" + v if isinstance(v, str) and v[:1] in "=+-@\t\r" else v) for k, v in row.items()})


def _query(args: argparse.Namespace, console: Any, query: Any, *extra: Any) -> tuple[Any, Any]:
    """The filter the flags give and ``query(engine, scoped filter, *extra)`` on the (indexed) store."""
    from mlharness.results_db.query import from_args

    f = from_args(args)
    store = _open(args, console)
    try:
        return f, store.run(query, f, *extra)
    finally:
        store.close()


def cmd_list(args: argparse.Namespace, console: Any) -> int:
    from mlharness.results_db.query import list_runs

    f, runs = _query(args, console, list_runs)
    return _print_runs(runs, f"{len(runs)} runs: {f.describe()}", args, console)


def cmd_best(args: argparse.Namespace, console: Any) -> int:
    from mlharness.results_db.query import best

    f, runs = _query(args, console, best)
    return _print_runs(runs, f"best VALID result per system: {f.describe()}", args, console)


def cmd_history(args: argparse.Namespace, console: Any) -> int:
    from rich.table import Table

    from mlharness.results_db.query import ALIASES, history

    if args.last is not None and args.last < 1:
        from mlharness.errors import MLHarnessError

        raise MLHarnessError(f"results history --last {args.last}: give a number of rows of at least 1")
    f, points = _query(args, console, history, args.metric)
    name = ALIASES.get(args.metric, args.metric)
    unit = "ns" if name.endswith("(ns)") else None
    if args.by == "commit":
        return _history_by_commit(points, args, console, f.describe(), unit)
    points = points[-args.last:] if args.last else points
    if args.json:
        print(json.dumps([run_dict(r, {"value": v}) for r, v in points], indent=2))
        return 0
    if args.csv:
        _print_csv([run_dict(r, {"value": v}) for r, v in points], ("value",))
        return 0
    table = Table("started (UTC)", "value", "system", "mlharness", "commit", "node", "folder",
                  title=_escape(f"{args.metric}: {f.describe()}"), title_justify="left")
    for r, v in points:
        table.add_row(r.started_at.strftime("%Y-%m-%d %H:%M:%S") if r.started_at else "",
                      _escape(_value(v, unit or (r.metric_unit if args.metric == "metric" else None))),
                      _escape(r.system), _escape(r.mlharness_version), _escape((r.git_commit or "")[:12]),
                      _escape(r.node_id[:12] if r.node_id else r.host), _escape(r.folder))
    console.print(table)
    return 0


def _history_by_commit(points: list[Any], args: argparse.Namespace, console: Any, what: str,
                       unit: str | None) -> int:
    from rich.table import Table

    from mlharness.results_db.query import by_commit

    groups = by_commit(points)
    groups = groups[-args.last:] if args.last else groups
    if args.json:
        print(json.dumps([{"commit": g.commit, "dirty": g.dirty, "runs": len(g.runs), "median": g.median,
                           "values": g.values, "first_started_at": _iso(g.runs[0].started_at),
                           "last_started_at": _iso(g.runs[-1].started_at),
                           "folders": [r.folder for r in g.runs]} for g in groups], indent=2))
        return 0
    if args.csv:
        import csv
        import sys

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["commit", "dirty", "runs", "median", "min", "max", "first_started_at"])
        for g in groups:
            writer.writerow([g.commit or "", g.dirty, len(g.runs), g.median, min(g.values), max(g.values),
                             _iso(g.runs[0].started_at) or ""])
        return 0
    table = Table("commit", "runs", "median", "min", "max", "first run (UTC)", "mlharness",
                  title=_escape(f"{args.metric} by commit: {what}"), title_justify="left")
    for g in groups:
        shown_unit = unit or (g.runs[0].metric_unit if args.metric == "metric" else None)
        commit = (g.commit or "(no commit recorded)")[:12] + (" (changed)" if g.dirty else "")
        first = g.runs[0].started_at
        table.add_row(_escape(commit), str(len(g.runs)), _escape(_value(g.median, shown_unit)),
                      _escape(_value(min(g.values), shown_unit)), _escape(_value(max(g.values), shown_unit)),
                      first.strftime("%Y-%m-%d %H:%M:%S") if first else "", _escape(g.runs[0].mlharness_version))
    console.print(table)
    return 0


def _iso(when: Any) -> str | None:
    return when.isoformat() if when is not None else None


def cmd_index(args: argparse.Namespace, console: Any) -> int:
    from mlharness.results_db.store import open_store

    if args.db is not None and args.root is None:
        from mlharness.errors import MLHarnessError

        raise MLHarnessError("results index --db URL needs the results root to index (ROOT)")
    store = open_store(args.root, args.db)
    store.close()
    _say_indexed(store.indexed, console, args)
    return 0


def cmd_upgrade(args: argparse.Namespace, console: Any) -> int:
    from mlharness.results_db.db import DB_FILE, open_db, shown_url, sqlite_url, upgrade

    url = args.db or sqlite_url(Path(args.root or "results"))
    if args.db is None and not Path(args.root or "results").is_dir():
        from mlharness.errors import MLHarnessError

        raise MLHarnessError(f"the results root {_escape(args.root or 'results')} is not a directory "
                             f"(its database is {DB_FILE} there)")
    engine = open_db(url)
    try:
        revision = upgrade(engine)
    finally:
        engine.dispose()
    console.print(f"{_escape(shown_url(url))}: schema at revision {_escape(revision)}", highlight=False)
    return 0
