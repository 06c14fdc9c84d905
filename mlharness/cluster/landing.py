"""Bringing a run folder into the driver's results tree: staged beside its destination, then renamed into place.

A good run lands at ``results_root / dest`` only when nothing is there: an earlier result is never replaced (the
outcome is an error naming it, unless the caller asked to skip jobs whose folder exists). A failed run's partial
output lands as ``<dest>.failed-<time>``, named as a failed local run's folder is (``mlharness/run/rundir.py``),
with a suffix when one of that second exists already. A rename within one folder is atomic, so a reader of the
tree (a report, the evaluation database's indexer) never sees half a run folder.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from pathlib import Path

from mlharness.cluster.child import safe_relative


class LandingError(Exception):
    """The run folder could not be put in place; the message names the path."""


def destination(results_root: Path, dest: str) -> Path:
    return Path(results_root) / safe_relative(dest, "job destination")


def staging_dir(final: Path) -> Path:
    """An empty folder beside ``final``, on the same file system (so the last step is a rename)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count():
        path = final.parent / f".{final.name}.landing-{os.getpid()}-{n}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def failed_name(final: Path) -> Path:
    base = f"{final.name}.failed-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in itertools.count():
        failed = final.parent / (base if n == 0 else f"{base}-{n}")
        if not failed.exists():
            return failed
    raise AssertionError("unreachable")


def place(staged: Path, final: Path, failed: bool) -> Path:
    """Rename the staged folder to ``final`` (a good run) or to a free ``<final>.failed-<time>``; where it went.
    A good run whose destination appeared meanwhile is kept as ``.failed-*`` too, and the error says so."""
    if failed:
        target = failed_name(final)
        os.rename(staged, target)
        return target
    try:
        os.rename(staged, final)  # refuses a non-empty folder; an empty one or a file is checked first
    except OSError as e:
        kept = failed_name(final)
        os.rename(staged, kept)
        raise LandingError(f"{final} exists, so the finished run was not put there (kept in {kept}): {e}") from e
    return final


def land_folder(source: Path, final: Path, failed: bool) -> Path:
    """Move a run folder (on this machine) into the tree; the source may be anywhere on the same host."""
    staged = staging_dir(final)
    for item in Path(source).iterdir():
        shutil.move(str(item), str(staged / item.name))
    return land_staged(staged, final, failed)


def land_staged(staged: Path, final: Path, failed: bool) -> Path:
    """Put a folder already staged beside ``final`` in place (see :func:`place`)."""
    if not failed and final.exists():
        kept = place(staged, final, failed=True)
        raise LandingError(f"{exists_error(final)}; the finished run is kept in {kept}")
    return place(staged, final, failed)


def exists_error(final: Path) -> str:
    return (f"{final} exists: an earlier result is never replaced (remove it, or resume, which skips the jobs "
            "whose folder exists)")
