"""Files a command writes where the user may keep their own: never replaced without ``--force``.

Every command that writes to a path the user names (``tune --output``, ``report --md/--html``, ``sysinfo --out``,
``accuracy ... --out-file``, ``dataset synth|prepare --out``) goes through :func:`check_free` or
:func:`write_text`: an existing file (or a non-empty folder) is an error naming it and ``--force``; with
``--force`` a text file is replaced atomically and the unified diff of old and new is shown. Results folders
under the run tree belong to mlharness and are protected by staging instead.

Files read back from results folders (LoadGen's logs, accuracy.txt, the JSON records mlharness writes) are read
through :mod:`mlharness.fileguard` with the bounds below, since such a folder may come from anywhere: a FIFO
there is refused, never waited on.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.fileguard import DATA_FILE_LIMIT, ErrorFactory, UnusableFile, parse_json, read_bytes_bounded

LOG_LIMIT = 16 << 20
"""Most bytes of a LoadGen summary or detail log, an accuracy.txt or a verify_*.txt read whole: a few KiB each,
a detail log a few MiB at most."""
RECORD_LIMIT = 256 << 20
"""Most bytes of a JSON record mlharness wrote (mlharness_run.json, step.json, a telemetry series, a sweep's
state): the largest, the telemetry of a long run sampled every few ms, are tens of MiB."""
ACCURACY_LOG_LIMIT = 4 << 30
"""Most bytes of LoadGen's mlperf_log_accuracy.json read whole: an LLM's token ids take hundreds of MiB; a log of
images larger than this cannot be decoded in memory as a whole anyway."""


def read_log_text(path: Path, what: str, limit: int = LOG_LIMIT, *, error: ErrorFactory = UnusableFile) -> str:
    """The text of a log or figures file (LoadGen's logs are ASCII): a regular file of at most ``limit`` bytes,
    bytes that are not UTF-8 replaced, as these files were always read."""
    return read_bytes_bounded(Path(path), what, limit, error=error).decode("utf-8", errors="replace")


def read_optional_json(path: Path, what: str, limit: int = RECORD_LIMIT) -> Any:
    """The JSON value of a record that may be missing or damaged: None when nothing is at ``path`` or it does not
    hold JSON (not UTF-8, malformed, nested too deeply). Anything there that is not a regular file, or is larger
    than ``limit``, is still an error naming it (exit 2)."""
    path = Path(path)
    if not path.exists():
        return None
    data = read_bytes_bounded(path, what, limit)
    try:
        return parse_json(data, f"{what} {path}", error=ValueError, allow_nan=True)
    except ValueError:
        return None


class OutputExists(MLHarnessError):
    """The output path holds the user's file; exit 2 (bad input)."""


def check_free(path: Path, force: bool, flag: str = "--force") -> None:
    """Raise :class:`OutputExists` when ``path`` is an existing file, or a folder with something in it."""
    path = Path(path)
    if force or not path.exists():
        return
    if path.is_dir():
        if not any(path.iterdir()):
            return
        raise OutputExists(f"{path} is a folder with files in it; not writing into it ({flag} writes over them)")
    raise OutputExists(f"{path} exists; not overwriting it ({flag} replaces it)")


def refuse_non_regular(path: Path, flag: str = "--force") -> None:
    """Raise :class:`OutputExists` when ``path`` holds anything but a regular file (a device node, a FIFO, a
    folder, a link): ``flag`` replaces a file, never one of those, whose loss would destroy what the user keeps
    there. A name that is not printable is shown escaped, so it cannot forge a line."""
    import stat

    from mlharness.fileguard import describe_kind

    shown = str(path) if str(path).isprintable() else ascii(str(path))
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputExists(f"{shown} cannot be checked: {e.strerror or e}; not writing there") from None
    if not stat.S_ISREG(mode):
        raise OutputExists(f"{shown} is {describe_kind(mode)}, not a regular file; not writing there "
                           f"({flag} replaces only a regular file)")


def unified_diff(old: str, new: str, path: Path) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"{path} (existing)", tofile=f"{path} (new)"))


def new_file_mode() -> int:
    """The mode ``open()`` gives a new file: 0666 less the process's umask (0644 usually)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then a rename). The file gets the mode
    of the one it replaces, or a new file's mode: never the private 0600 of the temporary file."""
    path = Path(path)
    refuse_non_regular(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.is_file() else new_file_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, force: bool, show: Callable[[str], None] | None = None) -> None:
    """Write a text file the user may own: refuse to replace an existing one without ``force``; when replacing,
    pass the unified diff to ``show`` (nothing when the content is the same)."""
    path = Path(path)
    # the file being replaced is one mlharness writes (a user.conf, a report): far below the data-file bound
    old = read_log_text(path, "output file", DATA_FILE_LIMIT) if path.is_file() else None
    if old is None and path.exists():
        raise OutputExists(f"{path} exists and is not a file; not writing there")
    if old is not None and not force:
        if show is not None:
            show(unified_diff(old, text, path) or f"{path}: the new content is the same\n")
        check_free(path, force)
    replace_text(path, text)
    if old is not None and show is not None and old != text:
        show(unified_diff(old, text, path))
