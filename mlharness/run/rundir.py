"""Run directories: staged in a sibling folder and moved into place only when the run succeeded, so a failed
run never overwrites an earlier good result. What LoadGen wrote is read back by :mod:`mlharness.loadgen.logs`.

An ``OSError`` while writing results (a full disk, a file-size limit, a read-only folder) becomes
:class:`ResultsWriteError` naming the path: the run fails with exit status 3 and earlier results stay as they
were. A staging folder is registered with the signal guard, so even an immediate exit on a second Ctrl-C keeps
it as ``*.failed-<time>`` instead of leaving a hidden ``.<name>.partial-*`` behind."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlharness.errors import ManifestError, MLHarnessError
from mlharness.loadgen.interrupt import GUARD, Interrupted
from mlharness.loadgen.logs import ResultsWriteError
from mlharness.run.destination import DestinationError, absolute, commit, lock_path, write_marker
from mlharness.supervise import note  # what a supervising parent is told (mlharness.supervise)

log = logging.getLogger(__name__)

def default_output(results_root: Path, system: str, benchmark: str, scenario: str, mode: str) -> Path:
    base = results_root / system / benchmark / scenario
    return base / "accuracy" if mode == "accuracy" else base / "performance" / "run_1"


def write_result(path: Path, text: str) -> None:
    """Write one result file; an OSError (e.g. ENOSPC, EFBIG) becomes :class:`ResultsWriteError` naming it."""
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise ResultsWriteError(path, e) from e


def results_error(e: OSError, folder: Path) -> MLHarnessError | None:
    """The :class:`ResultsWriteError` for an OSError raised while a run wrote into ``folder`` (its own path when
    the error names one inside the folder, else the folder); None when it names a path elsewhere (not a
    write of the run's results)."""
    name = e.filename if isinstance(e.filename, str | os.PathLike) else None
    if name is None:
        return ResultsWriteError(folder, e, "cannot write the run's results in")
    path = Path(name)
    try:
        inside = path.resolve().is_relative_to(Path(folder).resolve().parent)
    except OSError:
        inside = False
    return ResultsWriteError(path, e) if inside else None


def make_parent(final: Path) -> None:
    """Create the folder a run folder will be committed into (the lock file and the staging folder go there)."""
    parent = absolute(final).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as e:
        raise ResultsWriteError(parent, "it exists and is not a folder", "cannot create the folder") from e
    except OSError as e:
        raise ResultsWriteError(e.filename or parent, e, "cannot create the folder") from e


class StagedDir:
    """A folder beside the final one; ``commit()`` swaps it in, ``abandon()`` keeps it as ``*.failed-<time>``."""

    def __init__(self, final: Path, ident: dict[str, str] | None = None):
        self.final = absolute(final)  # never resolved: a symlink at the destination is refused, not followed
        self.ident = ident
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = self.final.parent / f".{self.final.name}.partial-{stamp}-{os.getpid()}"
        try:
            self.final.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ResultsWriteError(e.filename or self.final.parent, e, "cannot create the folder") from e
        try:
            self.path.mkdir()
        except OSError as e:
            raise ResultsWriteError(self.path, e, "cannot create the run folder") from e
        self._lock = threading.Lock()
        self._failed: Path | None = None
        GUARD.add_keeper(self.abandon)
        note("staged", self.path, self.final)

    def commit(self) -> Path:
        """Move the staged folder in (:func:`mlharness.run.destination.commit`: only an earlier run of the
        same identity is replaced). When a move fails, the earlier result stays and the staged folder is kept as
        ``*.failed-<time>``; the error names the path."""
        with GUARD.deferred():  # a signal between the two moves would leave neither result in place
            return self._commit()

    def _commit(self) -> Path:
        try:
            if self.ident is not None:
                write_marker(self.path, self.ident)
            kept = commit(self.path, self.final, self.ident or {})
        except DestinationError:
            self.fail(RuntimeError("the destination changed during the run"))
            raise
        except OSError as e:
            failed = self.fail(e)
            raise ResultsWriteError(self.final, e, f"cannot move the finished run (kept in {failed}) to") from e
        note("committed", self.path, self.final)  # the result is in place
        GUARD.remove_keeper(self.abandon)
        if kept is not None:
            log.warning("files that were not the earlier run's own are kept in %s", kept)
        return self.final

    def fail(self, error: BaseException) -> Path:
        """Keep the partial output of a run that raised ``error`` and say where it went (the staging folder
        itself when even that move fails: the original error matters more)."""
        try:
            failed = self.abandon()
        except OSError as e:
            log.error("the partial output could not be moved aside (%s); it is in %s", e, self.path)
            GUARD.remove_keeper(self.abandon)
            return self.path
        if isinstance(error, Interrupted):
            error.kept = failed  # the CLI's message names it
        else:
            log.error("run failed; its partial output is in %s", failed)
        return failed

    @contextmanager
    def guarded(self) -> Iterator[None]:
        """Run the block that writes into the staging folder: on any exception the folder is kept as
        ``*.failed-<time>``; an OSError writing the results becomes :class:`ResultsWriteError`."""
        try:
            yield
        except OSError as e:
            failed = self.fail(e)
            written = results_error(e, self.path)
            if written is None:
                raise
            written.moved(self.path, failed)
            raise written from e
        except BaseException as e:
            if isinstance(e, ManifestError) and self._discard_empty():  # refused before anything was written
                raise
            failed = self.fail(e)
            if isinstance(e, ResultsWriteError):
                e.moved(self.path, failed)
            raise

    def _discard_empty(self) -> bool:
        """Remove the staging folder (and the lock) when nothing was written into it: a manifest refused before
        the run wrote anything leaves no ``*.failed-<time>`` folder behind."""
        with self._lock:
            try:
                self.path.rmdir()  # only an empty folder
            except OSError:
                return False
            GUARD.remove_keeper(self.abandon)
            lock_path(self.final).unlink(missing_ok=True)
            note("abandoned", self.path)
            return True

    def abandon(self) -> Path:
        """Idempotent and thread-safe (the runner's watchdog, the signal guard and the main thread may all
        abandon); never collides with an earlier failed run of the same second."""
        GUARD.remove_keeper(self.abandon)
        with self._lock:
            if self._failed is not None:
                return self._failed
            # this run commits nothing now, and the process may be about to end without unwinding (a stuck
            # LoadGen, a second Ctrl-C): its lock file goes too, so nothing of it is left beside the results
            lock_path(self.final).unlink(missing_ok=True)
            base = f"{self.final.name}.failed-{time.strftime('%Y%m%d-%H%M%S')}"
            for n in itertools.count():
                failed = self.final.parent / (base if n == 0 else f"{base}-{n}")
                if failed.exists():
                    continue
                try:
                    os.rename(self.path, failed)
                except OSError as e:  # another process took the name between the check and the rename
                    if e.errno in (errno.EEXIST, errno.ENOTEMPTY) and failed.exists():
                        continue
                    raise
                self._failed = failed
                note("abandoned", self.path, failed)
                return failed
        raise AssertionError("unreachable")
