"""Queries over the evaluation database, built as SQLAlchemy expressions from a :class:`Filter` (never from text
assembled out of user input), and the query syntax ``report --query`` and ``compare --query`` take.

A query is words separated by spaces: ``field=value`` (``value`` may list alternatives: ``scenario=Offline,Server``)
and the bare words ``valid`` / ``invalid``; ``since=`` / ``until=`` take a date (``2026-05-01``) or a date and time
(``2026-05-01T12:00``, UTC). ``benchmark=resnet50 scenario=Offline valid since=2026-05-01``. The fields are the
flags of ``mlharness results list``, so a query and a command line select the same runs.
"""

from __future__ import annotations

import difflib
import shlex
import statistics
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.results_db.models import Metric, Run

# query word -> the column it filters (every one an equality test against one of the listed values)
COLUMNS = {"benchmark": "benchmark", "scenario": "scenario", "mode": "mode", "system": "system",
           "framework": "framework", "round": "round", "model": "mlperf_model", "manifest": "manifest",
           "node": "node_id", "host": "host", "kind": "kind", "test": "compliance_test", "label": "label"}
PREFIXED = ("node",)  # fields matched by prefix (a node id as the tables print it, 12 of its 56 characters)
WORDS = ("valid", "invalid")
DATES = ("since", "until")
# short names of LoadGen's summary lines for `results history`
PCTS = {"p50": "50.00", "p90": "90.00", "p95": "95.00", "p97": "97.00", "p99": "99.00", "p99.9": "99.90"}
ALIASES = {
    **{k: f"{v} percentile latency (ns)" for k, v in PCTS.items()},
    **{f"ttft_{k}": f"{v} percentile first token latency (ns)" for k, v in PCTS.items()},
    **{f"tpot_{k}": f"{v} percentile time to output token (ns)" for k, v in PCTS.items()},
    "mean_latency": "Mean latency (ns)", "samples_per_s": "Samples per second",
    "completed_samples_per_s": "Completed samples per second", "tokens_per_s": "Tokens per second",
    "completed_tokens_per_s": "Completed tokens per second",
}
PRIMARY = "metric"  # `history metric`: each run's primary figure (its scenario's metric line)


class QueryError(MLHarnessError):
    """A query names a field, value or date that does not exist; exit 2."""


@dataclass(frozen=True)
class Filter:
    """What ``results list`` flags and a ``--query`` both become. Each tuple: the run matches any of its values
    (empty: no condition)."""

    benchmark: tuple[str, ...] = ()
    scenario: tuple[str, ...] = ()
    mode: tuple[str, ...] = ()
    system: tuple[str, ...] = ()
    framework: tuple[str, ...] = ()
    round: tuple[str, ...] = ()
    model: tuple[str, ...] = ()
    manifest: tuple[str, ...] = ()
    node: tuple[str, ...] = ()
    host: tuple[str, ...] = ()
    kind: tuple[str, ...] = ()
    test: tuple[str, ...] = ()
    label: tuple[str, ...] = ()
    valid: bool | None = None  # True: VALID only; False: INVALID only
    since: datetime | None = None
    until: datetime | None = None
    roots: tuple[str, ...] = field(default=())  # results roots (absolute) the runs were indexed from

    def conditions(self) -> list[Any]:
        out: list[Any] = []
        from sqlalchemy import or_

        for word, column in COLUMNS.items():
            values = getattr(self, word)
            if values and word in PREFIXED:  # the table shows 12 characters of a node id: they select it
                out.append(or_(*(getattr(Run, column).startswith(v, autoescape=True) for v in values)))
            elif values:
                out.append(getattr(Run, column).in_(values))
        if self.valid is not None:
            out.append(Run.validity == ("VALID" if self.valid else "INVALID"))
        when = Run.started_at
        if self.since is not None:
            out.append(when >= self.since)
        if self.until is not None:
            out.append(when <= self.until)
        if self.roots:
            out.append(Run.root.in_(self.roots))
        return out

    def describe(self) -> str:
        parts = [f"{w}={','.join(getattr(self, w))}" for w in COLUMNS if getattr(self, w)]
        if self.valid is not None:
            parts.append("valid" if self.valid else "invalid")
        parts += [f"{w}={getattr(self, w).isoformat()}" for w in DATES if getattr(self, w) is not None]
        return " ".join(parts) or "every run"


def parse_date(text: str, what: str) -> datetime:
    """A date (the day's start) or a date and time, in UTC; an offset given is converted to UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise QueryError(f"{what} {text!r} is not a date: write 2026-05-01 or 2026-05-01T12:00 (UTC)") from None
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def until_end(value: datetime, text: str) -> datetime:
    """``until=2026-05-01`` includes that whole day."""
    if len(text.strip()) == 10:
        return value.replace(hour=23, minute=59, second=59, microsecond=999999)
    return value


def _unknown(word: str, query: str) -> QueryError:
    known = [*COLUMNS, *DATES, *WORDS]
    close = difflib.get_close_matches(word, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return QueryError(f"query {query!r}: unknown field '{word}'{hint} (fields: {', '.join(COLUMNS)}, "
                      f"{'=DATE, '.join(DATES)}=DATE; words: {', '.join(WORDS)})")


def parse_query(text: str) -> Filter:
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise QueryError(f"query {text!r}: {e}") from None
    values: dict[str, Any] = {}
    for word in words:
        name, eq, value = word.partition("=")
        key = name.strip().lower()
        if not eq:
            if key not in WORDS:
                raise _unknown(key, text) if key not in COLUMNS and key not in DATES else QueryError(
                    f"query {text!r}: '{key}' needs a value ({key}=...)")
            values["valid"] = key == "valid"
            continue
        if key in DATES:
            when = parse_date(value, f"query {text!r}: {key}")
            values[key] = until_end(when, value) if key == "until" else when
            continue
        if key not in COLUMNS:
            raise _unknown(key, text)
        alternatives = tuple(v for v in value.split(",") if v)
        if not alternatives:
            raise QueryError(f"query {text!r}: '{key}=' names no value")
        values[key] = values.get(key, ()) + alternatives
    return Filter(**values)


def from_args(args: Any) -> Filter:
    """The filter of ``results`` flags (``--benchmark`` ... ``--valid/--invalid``, ``--since``, ``--until``)."""
    values: dict[str, Any] = {}
    for f in fields(Filter):
        given = getattr(args, f.name, None)
        if f.name in COLUMNS and given:
            values[f.name] = tuple(v for g in given for v in g.split(",") if v)
    if getattr(args, "valid", None) is not None:
        values["valid"] = args.valid
    for key in DATES:
        text = getattr(args, key, None)
        if text:
            when = parse_date(text, f"--{key}")
            values[key] = until_end(when, text) if key == "until" else when
    return Filter(**values)


def with_roots(f: Filter, roots: list[Path]) -> Filter:
    return replace(f, roots=tuple(str(Path(r).resolve()) for r in roots))


def list_runs(engine: Any, f: Filter) -> list[Run]:
    """The matching runs, oldest first (then by folder)."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    stmt = select(Run).where(*f.conditions()).order_by(Run.started_at, Run.root, Run.folder)
    with Session(engine) as session:
        return list(session.scalars(stmt))


def lower_is_better(unit: str | None) -> bool:
    """A latency (SingleStream, MultiStream: ns) is better lower; a throughput higher."""
    return (unit or "") in ("ns", "us", "ms", "s")


def best(engine: Any, f: Filter) -> list[Run]:
    """The best VALID performance run per system (and per benchmark and scenario), direction aware; compliance
    audits' runs are left out (their figures are not the result). Ties go to the latest run."""
    from sqlalchemy import case, func, select
    from sqlalchemy.orm import Session, aliased

    score = case((Run.metric_unit.in_(("ns", "us", "ms", "s")), Run.metric_value), else_=-Run.metric_value)
    rank = func.row_number().over(partition_by=(Run.benchmark, Run.scenario, Run.system),
                                  order_by=(score.asc(), Run.started_at.desc(), Run.id.desc())).label("rank")
    inner = (select(Run.id, rank).where(*replace(f, valid=True).conditions(), Run.mode == "performance",
                                          Run.compliance_test.is_(None), Run.metric_value.is_not(None))
             .subquery())
    chosen = aliased(Run)
    stmt = (select(chosen).join(inner, inner.c.id == chosen.id).where(inner.c.rank == 1)
            .order_by(chosen.benchmark, chosen.scenario, chosen.system))
    with Session(engine) as session:
        return list(session.scalars(stmt))


def metric_name(engine: Any, name: str) -> str:
    """LoadGen's line for ``name`` (a short name of :data:`ALIASES`, or the line itself), refused naming the
    figures the database holds when it holds no such one."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    if name == PRIMARY:
        return PRIMARY
    full = ALIASES.get(name, name)
    with Session(engine) as session:
        if session.scalar(select(Metric.name).where(Metric.name == full).limit(1)) is not None:
            return full
        known = sorted(session.scalars(select(Metric.name).distinct()))
    close = difflib.get_close_matches(name, [*ALIASES, *known], n=3)
    raise QueryError(f"no figure '{name}' in the database" + (f"; did you mean {', '.join(map(repr, close))}?"
                     if close else "") + f" (short names: {PRIMARY}, {', '.join(ALIASES)}; or a summary line)")


def history(engine: Any, f: Filter, name: str) -> list[tuple[Run, float]]:
    """One figure of every matching run, in the order the runs were made (LoadGen's start time, then folder)."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    full = metric_name(engine, name)
    if full == PRIMARY:
        stmt = select(Run, Run.metric_value).where(*f.conditions(), Run.metric_value.is_not(None))
    else:
        stmt = select(Run, Metric.value).join(Metric, Metric.run_id == Run.id).where(*f.conditions(),
                                                                                     Metric.name == full)
    stmt = stmt.order_by(Run.started_at, Run.finished_at, Run.folder)
    with Session(engine) as session:
        return [(run, float(value)) for run, value in session.execute(stmt)]


@dataclass
class CommitPoint:
    """The runs of one mlharness commit in a figure's history (``results history --by commit``)."""

    commit: str | None  # None: runs that recorded no commit (not run from a checkout)
    values: list[float]
    runs: list[Run]

    @property
    def dirty(self) -> bool:
        """Some run of the commit ran with the package's files changed from it: not quite that commit's code."""
        return any(r.git_dirty for r in self.runs)

    @property
    def median(self) -> float:
        return statistics.median(self.values)


def by_commit(points: list[tuple[Run, float]]) -> list[CommitPoint]:
    """A history's points grouped by the commit that made them, each commit where its first run falls in time
    (a commit measured again later stays where it was first measured)."""
    groups: dict[str | None, CommitPoint] = {}
    for run, value in points:
        g = groups.setdefault(run.git_commit, CommitPoint(run.git_commit, [], []))
        g.values.append(value)
        g.runs.append(run)
    return list(groups.values())


def folders(engine: Any, f: Filter) -> list[Path]:
    """The run folders a query selects, as paths (results root / folder)."""
    return [Path(r.root) / r.folder for r in list_runs(engine, f)]
