"""Every run's row in the evaluation database the moment its folder is committed, without a ``results`` query.

A run folder is indexed into the embedded database of the results root that holds it (the same file and the same
incremental indexer ``mlharness results`` uses): ``mlharness run``'s ``--results-root`` (default ``./results``,
the root ``results list`` and ``results index`` take by default), ``sweep``'s default root ``./results`` (a sweep
has no root option of its own), ``submission run``'s ``--results`` tree and ``campaign run``'s ``--results``. A
run written elsewhere (``--output`` outside that root) has no root whose database would find it: it is not
indexed; ``mlharness results index ROOT`` of whichever root holds it adds it later.

Indexing never turns a good run into a failure: a database that cannot be written is one notice on stderr, once
per root and process, saying that ``mlharness results index ROOT`` adds the row later. Kept light: SQLAlchemy is
imported only when a run is indexed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

_NOT_WRITTEN: set[str] = set()  # roots whose database could not be written, said once per process


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def index_quietly(root: Path, say: Callable[[str], None] | None = None) -> bool:
    """Bring the embedded database of the results root ``root`` up to date as a run lands in it (incremental: the
    new folder is read, the others only signed). Never raises (but for a signal): the run is committed whatever
    the database does, so one that cannot be written (a read-only folder, a lock held past its bound, a corrupt
    file) is one notice (``say``, else a line on stderr), once per root and process, and False."""
    try:
        from mlharness.results_db.db import open_db, sqlite_url
        from mlharness.results_db.indexer import index

        engine = open_db(sqlite_url(root))
        try:
            index(engine, root, sole_root=True)
        finally:
            engine.dispose()
        return True
    except Exception as e:  # noqa: BLE001 - whatever the database does, the run it indexes stands
        key = str(Path(root).absolute())
        if key not in _NOT_WRITTEN:
            _NOT_WRITTEN.add(key)
            reason = " ".join(str(e).split()) or type(e).__name__
            (say or _warn)(f"the run's row was not written to the evaluation database of {root} ({reason}); "
                           f"`mlharness results index {root}` adds it later")
        return False


def root_holding(folder: Path, root: Path) -> Path | None:
    """``root`` when the committed run folder ``folder`` lies in it where its indexer looks (not in a hidden
    folder such as a submission's ``.mlharness/work``, not in a ``.failed-*`` one), else None."""
    root = Path(root)
    try:
        rel = Path(folder).resolve().relative_to(root.resolve())
    except (OSError, ValueError):
        return None
    if not root.is_dir() or not rel.parts or any(p.startswith(".") or ".failed-" in p for p in rel.parts):
        return None
    return root


def index_committed(folder: Path, root: Path, say: Callable[[str], None] | None = None) -> bool | None:
    """Index the results root ``root`` right after a run committed ``folder`` in it (:func:`index_quietly`);
    None, touching nothing, when ``folder`` is not inside ``root`` (:func:`root_holding`)."""
    held = root_holding(folder, root)
    return None if held is None else index_quietly(held, say)
