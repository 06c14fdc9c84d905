"""Where a run lands, and what may already be there.

A run's destination (``--output``, or ``<results>/<system>/<benchmark>/<scenario>/...``) must be absent, or a
folder that mlharness itself committed for an earlier run of the same benchmark, scenario and mode. That is known
from a marker file, :data:`MARKER`, written into every committed run folder with the list of files the run wrote;
a folder's name never counts. Anything else (a file, a device, a FIFO, a folder of other files, ``.``, the results
root, a symlink, a path that goes through a symlink below the results root) is refused before the run starts, with
exit status 2 and the fix.

Replacing an earlier run removes only the files its marker lists; anything a user added to it since is kept, in
the earlier folder renamed ``<name>.previous-<time>``. The commit renames with ``RENAME_NOREPLACE`` where the
kernel has it, so a folder that appeared at the destination meanwhile is never swapped out, and a rename never
follows a symlink at its destination.

A lock file (``.<name>.lock`` beside the destination, ``flock``-ed) makes a second run to the same destination
fail at once, naming the process that holds it; ``submission run`` holds one on its tree the same way
(:func:`exclusive`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.fileguard import UnusableFile, describe_kind, read_bytes_bounded
from mlharness.supervise import command_pid

log = logging.getLogger(__name__)

MARKER = ".mlharness-run.json"
MARKER_FORMAT = 1
MAX_MARKER_BYTES = 1 << 20


class DestinationError(MLHarnessError):
    """The run's destination holds something mlharness did not write, or is not a folder path it may use
    (exit status 2: nothing ran)."""


class DestinationBusy(MLHarnessError):
    """Another mlharness process is writing to the same destination (exit status 2: nothing ran)."""


def absolute(path: Path | str) -> Path:
    """``path`` made absolute without following symlinks (``Path.resolve`` would follow them)."""
    return Path(os.path.abspath(os.fspath(path)))


def what_is(path: Path) -> str:
    """What a path that exists is, in words (``lstat``: a symlink is named as one)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "nothing"
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a file" if stat.S_ISREG(mode) else describe_kind(mode)


def identity(benchmark: str, scenario: str, mode: str) -> dict[str, str]:
    return {"benchmark": benchmark, "scenario": scenario, "mode": mode}


def _describe(ident: dict[str, Any]) -> str:
    return f"a {ident.get('scenario')} {ident.get('mode')} run of {ident.get('benchmark')}"


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a run folder mlharness committed, or None (no marker, or one that is not ours)."""
    path = folder / MARKER
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MARKER_BYTES:
            return None
        data = json.loads(read_bytes_bounded(path, "run marker", MAX_MARKER_BYTES))
    except (OSError, ValueError, UnusableFile):
        return None
    if not isinstance(data, dict) or data.get("format") != MARKER_FORMAT or not isinstance(data.get("files"), list):
        return None
    return data


def write_marker(folder: Path, ident: dict[str, str]) -> None:
    """Record, in the staged run folder, that mlharness wrote it and which files are its own."""
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())
    data = {"format": MARKER_FORMAT, **ident, "pid": command_pid(), "written": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "files": [f for f in files if f != MARKER]}
    (folder / MARKER).write_text(json.dumps(data, indent=1) + "\n")


def check_destination(final: Path, ident: dict[str, str], results_root: Path | None = None) -> None:
    """Refuse, before anything runs, a destination a run may not commit to (see the module docstring)."""
    final = absolute(final)
    fix = "choose another --output, or move it away"
    cwd = absolute(Path.cwd())
    if final == cwd or cwd.is_relative_to(final):
        raise DestinationError(f"output {final} is the current folder or one that holds it; a run writes a folder "
                               f"of its own: {fix}")
    if results_root is not None:
        root = absolute(results_root)
        if root.is_relative_to(final):
            raise DestinationError(f"output {final} is the results root {root} or holds it; it would replace every "
                                   f"result there: {fix}")
        if final.is_relative_to(root):
            _refuse_symlinks(final, root)
    kind = what_is(final)
    if kind == "nothing":
        return
    if kind != "a folder":
        raise DestinationError(f"output {final} exists and is {kind}, not a run folder mlharness wrote; not "
                               f"replacing it: {fix}")
    marker = read_marker(final)
    if marker is None:
        if not any(os.scandir(final)):
            return  # an empty folder holds nothing to lose
        raise DestinationError(f"output {final} is a folder mlharness did not write (it has no {MARKER}); not "
                               f"replacing what is in it: {fix}")
    theirs = {k: marker.get(k) for k in ident}
    if theirs != ident:
        raise DestinationError(f"output {final} holds {_describe(theirs)}; this is {_describe(ident)}, which would "
                               f"replace it: {fix}")


def _refuse_symlinks(final: Path, root: Path) -> None:
    """Below the results root no component may be a symlink: results would land outside the root."""
    here = root
    for part in final.relative_to(root).parts:
        here = here / part
        if os.path.islink(here):
            raise DestinationError(f"{here} inside the results root {root} is a symlink (to {os.readlink(here)}); "
                                   f"results are never written through one: remove the link or choose another "
                                   f"--output")


# ---------------------------------------------------------------------------------------------------- commit
_libc: Any = None
RENAME_NOREPLACE = 1
AT_FDCWD = -100


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, failing with ``FileExistsError`` when ``dst`` exists (``renameat2`` with
    ``RENAME_NOREPLACE``; where the kernel or C library lacks it, a check just before a plain rename)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fn = getattr(_libc, "renameat2", None)
    if fn is not None:
        if fn(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def commit(staged: Path, final: Path, ident: dict[str, str]) -> Path | None:
    """Put the staged run folder at ``final``. An earlier run of the same identity there is replaced: the files
    its marker lists are removed; a folder still holding other files is kept as ``<name>.previous-<time>`` and
    returned. Raises :class:`DestinationError` when ``final`` changed into something else since the check."""
    check_destination(final, ident)
    if not os.path.lexists(final):
        rename_noreplace(staged, final)
        return None
    if read_marker(final) is None:  # an empty folder: nothing to keep
        os.rmdir(final)
        rename_noreplace(staged, final)
        return None
    aside = final.parent / f".{final.name}.old-{os.getpid()}"
    rename_noreplace(final, aside)
    try:
        rename_noreplace(staged, final)
    except OSError:
        rename_noreplace(aside, final)
        raise
    return remove_run(aside, final)


def remove_run(folder: Path, final: Path) -> Path | None:
    """Delete what an earlier run wrote (its marker's list); what else is in it stays, renamed beside ``final``."""
    marker = read_marker(folder) or {"files": []}
    for rel in marker["files"]:
        if not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts:
            continue
        path = folder / rel
        if os.path.islink(path) or path.is_file():
            path.unlink(missing_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        folder.rmdir()
        return None
    except OSError:
        kept = final.parent / f"{final.name}.previous-{time.strftime('%Y%m%d-%H%M%S')}"
        n = 0
        while os.path.lexists(kept):
            n += 1
            kept = kept.with_name(f"{final.name}.previous-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        os.rename(folder, kept)
        log.warning("the earlier run in %s held files mlharness did not write; they are kept in %s", final, kept)
        return kept


# ---------------------------------------------------------------------------------------------------- locks
def lock_path(final: Path) -> Path:
    final = absolute(final)
    return final.parent / f".{final.name}.lock"


@contextmanager
def exclusive(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``path`` (created, and removed when released) or fail at once with
    :class:`DestinationBusy` naming the process that holds it."""
    path = absolute(path)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise DestinationError(f"cannot create the lock file {path} for {what}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise DestinationBusy(f"{what} is in use by {holder} (lock file {path}); wait for it to finish, or "
                                  f"choose another destination") from None
        try:
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed it as we opened it: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"mlharness (pid {command_pid()})\n".encode(), 0)  # the pid a user would signal
        yield
    finally:
        try:
            if os.fstat(fd).st_ino == os.lstat(path).st_ino:  # not a lock file another process made since
                os.unlink(path)
        except OSError:
            pass
        os.close(fd)
