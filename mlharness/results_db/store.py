"""The database a command asks for, indexed and ready to query: the embedded SQLite file of a results root, or a
server given with ``--db URL``.

Without ``--db`` the results root's own file (``<root>/mlharness_results.sqlite``) is opened and the root is
indexed first (incremental, so a query over an unchanged tree reads no run folder), and queries see that root.
With ``--db`` a root given is indexed into the server's database and queries see that root; without a root they
see every root the database holds (a team's shared results).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.report.treefiles import shown
from mlharness.results_db.db import failed, open_db, sqlite_url
from mlharness.results_db.indexer import IndexResult, index
from mlharness.results_db.query import Filter, list_runs, parse_query, with_roots

DEFAULT_ROOT = Path("results")


@dataclass
class Store:
    engine: Any
    roots: list[Path]  # the roots queries see (empty: every root of the database)
    indexed: IndexResult | None

    def scoped(self, f: Filter) -> Filter:
        return with_roots(f, self.roots) if self.roots else f

    def run(self, query: Any, f: Filter, *extra: Any) -> Any:
        """``query(engine, the filter scoped to this store's roots, *extra)``; a database error is one line
        naming the database (exit 2), never a traceback."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            return query(self.engine, self.scoped(f), *extra)
        except SQLAlchemyError as e:
            raise failed(self.engine, e, "could not be queried") from None

    def close(self) -> None:
        self.engine.dispose()


def open_store(root: Path | None, db: str | None, refresh: bool = True) -> Store:
    if db is None:
        root = Path(root or DEFAULT_ROOT)
        if not root.is_dir():
            raise MLHarnessError(f"the results root {shown(root)} is not a directory: give the folder your runs "
                                 "wrote into (mlharness run's --results-root, default ./results), or --db URL")
        engine = open_db(sqlite_url(root))
        done = index(engine, root, sole_root=True) if refresh else None
        return Store(engine, [root.resolve()], done)
    engine = open_db(db)
    if root is None:
        return Store(engine, [], None)
    done = index(engine, root) if refresh else None
    return Store(engine, [Path(root).resolve()], done)


def query_folders(root: Path | None, db: str | None, query: str) -> tuple[Path, list[Path]]:
    """The run folders ``query`` selects under ``root`` (indexed first), with the root they lie in; refused when
    none matches, or when they lie under several roots or are missing on this machine (a shared database's
    runs of another machine)."""
    f = parse_query(query)
    store = open_store(root, db)
    try:
        runs = store.run(list_runs, f)
    finally:
        store.close()
    if not runs:
        where = shown(root) if root is not None else "the database"
        raise MLHarnessError(f"query {query!r} matches no run in {where} ({f.describe()})")
    roots = sorted({r.root for r in runs})
    if len(roots) > 1:
        raise MLHarnessError(f"query {query!r} matches runs of {len(roots)} results roots ({', '.join(roots[:4])}): "
                             "give the root to report on, or narrow the query")
    base = Path(roots[0])
    found = [base / r.folder for r in runs]
    missing = [p for p in found if not p.is_dir()]
    if missing:
        raise MLHarnessError(f"query {query!r}: {len(missing)} of its run folders are not on this machine "
                             f"({shown(missing[0])}{', ...' if len(missing) > 1 else ''}): index them again "
                             "(`mlharness results index ROOT`) or copy the tree here")
    return base, found
