"""Index a results root into the evaluation database, incrementally.

Each run folder's files are signed by name, size and modification time (:func:`folders.signature`): a folder
whose signature is the one stored is not read again, a changed one is read and its rows replaced, a folder that
is gone loses its rows (its metrics with it). Nothing is written into the results tree except, by default, the
database file itself at its root.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.report.treefiles import shown
from mlharness.results_db.db import exclusive, failed
from mlharness.results_db.folders import read_found, walk
from mlharness.results_db.models import Metric, Run

log = logging.getLogger(__name__)


@dataclass
class IndexResult:
    root: Path
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # folders that could not be read: named, left out
    seconds: float = 0.0

    def line(self) -> str:
        return (f"indexed {shown(self.root)}: {len(self.added)} added, {len(self.updated)} updated, "
                f"{self.unchanged} unchanged, {len(self.removed)} removed"
                + (f", {len(self.errors)} unreadable" if self.errors else "") + f" ({self.seconds:.2f} s)")


def index(engine: Any, root: Path, sole_root: bool = False) -> IndexResult:
    """Bring the rows of ``root`` up to date with its run folders. ``sole_root``: the database belongs to this
    root alone (the embedded file at its root), so rows of any other root (the tree before it was moved) go."""
    from sqlalchemy.exc import SQLAlchemyError

    start = time.monotonic()
    root = Path(root).resolve()
    if not root.is_dir():
        raise MLHarnessError(f"the results root {shown(root)} is not a directory")
    result = IndexResult(root)
    found = {f.rel: f for f in walk(root)}
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    try:
        _index(engine, root, sole_root, found, now, result)
    except SQLAlchemyError as e:
        raise failed(engine, e, f"could not index {shown(root)}") from None
    result.seconds = time.monotonic() - start
    return result


def _index(engine: Any, root: Path, sole_root: bool, found: dict[str, Any], now: datetime,
           result: IndexResult) -> None:
    from sqlalchemy import delete, select
    from sqlalchemy.orm import Session

    # one indexer of a database at a time: two at once would both add the same new folders
    with Session(engine) as session, session.begin(), exclusive(engine, session.connection()):
        if sole_root:
            session.execute(delete(Run).where(Run.root != str(root)))
        stored = {folder: (rid, sig) for rid, folder, sig in session.execute(
            select(Run.id, Run.folder, Run.signature).where(Run.root == str(root)))}
        gone = [rid for folder, (rid, _) in stored.items() if folder not in found]
        result.removed = sorted(folder for folder in stored if folder not in found)
        if gone:
            session.execute(delete(Metric).where(Metric.run_id.in_(gone)))
            session.execute(delete(Run).where(Run.id.in_(gone)))
        for rel, f in sorted(found.items()):
            old = stored.get(rel)
            if old is not None and old[1] == f.signature:
                result.unchanged += 1
                continue
            try:
                indexed = read_found(root, f)
            except MLHarnessError as e:
                result.errors.append(f"{shown(rel)}: {e}")
                log.warning("not indexed: %s: %s", shown(rel), e)
                continue
            if old is not None:
                session.execute(delete(Metric).where(Metric.run_id == old[0]))
                session.execute(delete(Run).where(Run.id == old[0]))
                result.updated.append(rel)
            else:
                result.added.append(rel)
            run = Run(root=str(root), indexed_at=now, **indexed.row)
            run.metrics = [Metric(name=name[:256], value=value) for name, value in sorted(indexed.metrics.items())]
            session.add(run)
