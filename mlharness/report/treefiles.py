"""Files read from result trees by ``report``, ``compare`` and ``sweep --resume``: regular files only, read within
a size bound, JSON of the shape the reader expects, and names shown escaped.

A results tree may come from anywhere (a colleague's archive, a shared disk), so nothing in it is trusted: a FIFO
named ``mlperf_log_summary.txt`` would block ``open`` for ever, a device would never end, a JSON list where an
object is expected would fail deep inside the report, and a folder name holding a newline or an escape sequence
would forge lines on the terminal. Every reader of these commands goes through this module, so each such file is
one error (exit 2) naming the file, what it is and, for JSON, the field that is wrong.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.fileguard import describe_kind, parse_json, read_bytes_bounded

KiB, MiB = 1 << 10, 1 << 20
TEXT_LIMIT = 16 * MiB
"""LoadGen's summary, accuracy.txt, a verify_*.txt: a few KiB each."""
JSON_LIMIT = 256 * MiB
"""mlharness_run.json, the telemetry series, sweep.json: the largest real ones (telemetry of a long run sampled
every few ms) are tens of MiB."""
TRACE_LIMIT = 1 << 30
"""A framework trace holds an event per operator call: hundreds of MiB for a long traced run."""


class TreeFileError(MLHarnessError):
    """A file of a results tree is not a regular file, is too large, or does not hold what it should; exit 2."""


def _shown_part(part: str) -> str:
    return part if part.isprintable() else repr(part)


def shown(name: Any) -> str:
    """A path or a name from a tree as it may be printed: each component holding a character that is not
    printable (a newline, ESC, a bidirectional override) is shown as a Python string literal, so a name can
    neither forge a line nor send terminal escapes; printable names are shown as they are."""
    text = str(name)
    if text.isprintable():
        return text
    return "/".join(_shown_part(p) for p in text.split("/"))


def present(path: Path, what: str) -> bool:
    """Whether ``path`` holds a regular file (symbolic links followed); False when nothing is there. Anything
    else there (a FIFO, a device, a folder, a broken link) is an error naming what it is: the tree is not what
    it seems, and leaving the file out would report something else without saying so."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ENOENT:
            try:
                os.lstat(path)
            except OSError:
                return False
            raise TreeFileError(f"{what} {shown(path)} is a broken symbolic link (to {shown(os.readlink(path))}); "
                                "it points at nothing") from None
        raise TreeFileError(f"{what} {shown(path)} cannot be read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TreeFileError(f"{what} {shown(path)} is {describe_kind(st.st_mode)}, not a regular file; remove it "
                            "or give a tree that mlharness wrote")
    return True


def read_bytes(path: Path, what: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (never more than ``limit``): opened without blocking and checked
    on the open descriptor, so a FIFO or a device is refused, never waited on or read without end."""
    return read_bytes_bounded(Path(path), f"{what} {shown(path)}", limit, error=TreeFileError, name_path=False)


def read_text(path: Path, what: str, limit: int = TEXT_LIMIT) -> str:
    """The text of a tree's file; bytes that are not UTF-8 are replaced (LoadGen's logs are ASCII)."""
    return read_bytes(path, what, limit).decode("utf-8", errors="replace")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def read_json(path: Path, what: str, limit: int = JSON_LIMIT, shape: Any = None) -> Any:
    """The JSON of a tree's file, checked against ``shape`` (see :func:`check_shape`; by default: an object)."""
    data = read_bytes(path, what, limit)
    try:
        value = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError as e:
        raise TreeFileError(f"{what} {shown(path)} is not valid JSON: {e}") from None
    except RecursionError:
        raise TreeFileError(f"{what} {shown(path)} is not valid JSON: nested too deeply") from None
    check_shape(value, {} if shape is None else shape, path, what)
    return value


def read_optional_json(path: Path, what: str, limit: int = JSON_LIMIT) -> Any:
    """The JSON value of a tree's file that may be absent or damaged: None when nothing is there or it does not hold
    JSON; anything there that is not a regular file, or is larger than ``limit``, is still an error naming it."""
    if not present(path, what):
        return None
    try:
        return parse_json(read_bytes(path, what, limit), f"{what} {shown(path)}", error=ValueError,
                          allow_nan=True)
    except ValueError:
        return None


NUMBER = (int, float)
STRING = (str,)
ANY = ()


class Each:
    """The shape of every value of a JSON object (``Each(NUMBER)``: an object of numbers)."""

    def __init__(self, shape: Any):
        self.shape = shape


class Need:
    """A field of an object that must not be null, with its shape; it must be there too unless ``missing_ok``."""

    def __init__(self, shape: Any, missing_ok: bool = False):
        self.shape = shape
        self.missing_ok = missing_ok


def check_shape(value: Any, shape: Any, path: Path, what: str, field: str = "") -> None:
    """Raise :class:`TreeFileError` naming the file and the field where ``value`` differs from ``shape``.

    A shape is a tuple of types (a leaf; ``()`` for any value; booleans are never numbers), a dict (a JSON object
    whose listed fields, when present and not null, have their shapes; other fields are free), a one-element list
    (a JSON list of elements of that shape), :class:`Each` or :class:`Need`."""
    where = f"field '{shown(field)}'" if field else "its top level"
    if isinstance(shape, Need):
        shape = shape.shape
    if isinstance(shape, tuple):
        if shape and (not isinstance(value, shape) or isinstance(value, bool) and bool not in shape):
            expected = " or ".join(dict.fromkeys(_json_type(t()) for t in shape))
            raise TreeFileError(f"{what} {shown(path)}: {where} is {_json_type(value)}, expected {expected}")
        return
    if isinstance(shape, list):
        if not isinstance(value, list):
            raise TreeFileError(f"{what} {shown(path)}: {where} is {_json_type(value)}, expected a list")
        for i, item in enumerate(value):
            if item is None and isinstance(shape[0], Need):
                raise TreeFileError(f"{what} {shown(path)}: field '{shown(field)}[{i}]' is null")
            if item is not None:
                check_shape(item, shape[0], path, what, f"{field}[{i}]")
        return
    if not isinstance(value, dict):
        raise TreeFileError(f"{what} {shown(path)}: {where} is {_json_type(value)}, expected an object")
    items = value.items() if isinstance(shape, Each) else ((k, value.get(k)) for k in shape)
    for key, item in items:
        need = None if isinstance(shape, Each) else shape[key]
        if item is None and isinstance(need, Need) and not (need.missing_ok and key not in value):
            name = f"{field}.{key}" if field else key
            raise TreeFileError(f"{what} {shown(path)}: field '{shown(name)}' is "
                                f"{'null' if key in value else 'missing'}")
        if item is not None:
            check_shape(item, shape.shape if isinstance(shape, Each) else shape[key], path, what,
                        f"{field}.{key}" if field else str(key))


def check_output(path: Path, force: bool, flag: str = "--force") -> None:
    """Refuse an output path (``report --html/--md``, ``compare --html``) that holds anything but a regular file,
    with or without ``flag`` (:func:`mlharness.userfiles.refuse_non_regular`), and a regular file without ``flag``
    (:func:`mlharness.userfiles.check_free`)."""
    from mlharness.userfiles import check_free, refuse_non_regular

    refuse_non_regular(Path(path), flag)
    check_free(path, force, flag)


def printable(text: Any) -> str:
    """Text read from a tree as the terminal gets it: each character that is not printable (a newline, ESC) as
    its escape (``\\n``, ``\\x1b``), so a value can neither forge a line nor move the cursor."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
