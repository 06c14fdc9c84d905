"""Run directories: staged in a sibling folder and moved into place only when the run succeeded, so a failed
run never overwrites an earlier good result. Also reads back what LoadGen wrote (summary, detail log).

An ``OSError`` while writing results (a full disk, a file-size limit, a read-only folder) becomes
:class:`ResultsWriteError` naming the path: the run fails with exit status 3 and earlier results stay as they
were. A staging folder is registered with the signal guard, so even an immediate exit on a second Ctrl-C keeps
it as ``*.failed-<time>`` instead of leaving a hidden ``.<name>.partial-*`` behind."""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import ManifestError, MLHarnessError, RunFailed
from mlharness.run.destination import DestinationError, absolute, commit, lock_path, write_marker
from mlharness.loadgen.interrupt import GUARD, Interrupted

log = logging.getLogger(__name__)

METRIC_LINES = {
    "SingleStream": ("90.0th percentile latency (ns)", "ns"),
    "MultiStream": ("99.0th percentile latency (ns)", "ns"),
    "Server": ("Completed samples per second", "samples/s"),
    "Offline": ("Samples per second", "samples/s"),
}


def default_output(results_root: Path, system: str, benchmark: str, scenario: str, mode: str) -> Path:
    base = results_root / system / benchmark / scenario
    return base / "accuracy" if mode == "accuracy" else base / "performance" / "run_1"


class ResultsWriteError(RunFailed):
    """Results could not be written (disk full, file too large, folder not writable): exit status 3."""

    def __init__(self, path: Path | str, error: OSError | str, what: str = "cannot write"):
        self.path = Path(path)
        self.reason = error if isinstance(error, str) else (error.strerror or str(error))
        self.what = what
        super().__init__(self._text())

    def _text(self) -> str:
        return (f"{self.what} {self.path}: {self.reason}{_free_space(self.path)}. The run produced no result; "
                f"earlier results are untouched")

    def moved(self, staging: Path, failed: Path) -> None:
        """The staging folder the path was in is now ``failed``: name the file where the user will find it."""
        if self.path.is_relative_to(staging):
            self.path = failed / self.path.relative_to(staging)
            self.message = self._text()


def _free_space(path: Path) -> str:
    for folder in (path, *path.parents):
        try:
            usage = shutil.disk_usage(folder)
        except OSError:
            continue
        return f"; {usage.free / 2**20:,.1f} MiB free on its file system"
    return ""


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
                return failed
        raise AssertionError("unreachable")


# how each of LoadGen's logs ends when it was written in full (LoadGen cannot report a failed write)
_LOG_ENDINGS = {
    "mlperf_log_summary.txt": ("encountered during test.", "See detailed log."),
    "mlperf_log_detail.txt": ("}",),
    "mlperf_log_accuracy.json": ("]",),
}


def check_loadgen_logs(outdir: Path) -> None:
    """LoadGen writes its logs from C++ and ignores write errors: a full disk or a file-size limit leaves them
    cut short. Raise :class:`ResultsWriteError` naming the first log that is missing or incomplete."""
    for name, endings in _LOG_ENDINGS.items():
        path = Path(outdir) / name
        try:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - 256))
                tail = f.read().decode(errors="replace").rstrip()
        except FileNotFoundError:
            if name == "mlperf_log_accuracy.json":
                continue
            raise ResultsWriteError(path, "it is missing (is the disk full?)", "LoadGen could not write") from None
        except OSError as e:
            raise ResultsWriteError(path, e, "cannot read LoadGen's log") from e
        if not tail.endswith(endings):
            raise ResultsWriteError(path, f"it ends after {size:,} bytes, cut short (is the disk full or the "
                                          f"file size limited?)", "LoadGen could not write in full")


@dataclass
class Summary:
    scenario: str
    valid: bool
    metric_name: str
    metric_value: float | None
    metric_unit: str
    fields: dict[str, str] = field(default_factory=dict)


# token-stream models: LoadGen's throughput lines count tokens (SingleStream keeps its latency percentile)
TOKEN_METRIC_LINES = {
    "Server": ("Completed tokens per second", "tokens/s"),
    "Offline": ("Tokens per second", "tokens/s"),
}


def parse_summary(path: Path, scenario: str, tokens: bool = False) -> Summary:
    if not path.is_file():
        raise MLHarnessError(f"LoadGen wrote no summary at {path}")
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            fields.setdefault(k.strip(), v.strip())
    lg_scenario = "Server" if scenario == "Interactive" else scenario
    name, unit = (TOKEN_METRIC_LINES if tokens and lg_scenario in TOKEN_METRIC_LINES else METRIC_LINES)[lg_scenario]
    raw = fields.get(name)
    value = float(raw) if raw not in (None, "") else None
    return Summary(scenario, fields.get("Result is") == "VALID", name, value, unit, fields)


_MLLOG = re.compile(r"^:::MLLOG (\{.*\})\s*$")


def read_detail(path: Path) -> list[dict[str, Any]]:
    """The ``:::MLLOG`` events of an mlperf_log_detail.txt."""
    events = []
    for line in path.read_text(errors="replace").splitlines():
        m = _MLLOG.match(line)
        if m:
            try:
                events.append(json.loads(m.group(1)))
            except json.JSONDecodeError:
                continue
    return events


def detail_values(path: Path) -> dict[str, Any]:
    """key → value of the detail log's events (the last event wins; errors collected under 'errors')."""
    values: dict[str, Any] = {}
    errors = []
    for ev in read_detail(path):
        key = ev.get("key")
        if key is None:
            continue
        if key.startswith("error") or ev.get("metadata", {}).get("is_error"):
            errors.append({"key": key, "value": ev.get("value")})
        values[key] = ev.get("value")
    values["errors"] = errors
    return values
