"""Files read from paths a user names: refused unless they are regular files, and read within a size bound.

A FIFO given as a model file or user.conf blocks forever on ``open``; a character device such as ``/dev/zero``
never ends; a folder or socket fails deep inside a framework with a message that does not say why. Every
reader of a user-named file goes through these functions, so such a path is an error naming what it really
is before anything opens it, and no read costs more than its bound.

The file is opened non-blocking and checked with ``fstat`` on the open descriptor: a path swapped for a FIFO
between the check and the read is still refused, never waited on.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from mlharness.errors import MLHarnessError

ErrorFactory = Callable[[str], Exception]
"""Builds the exception from a one-line message, e.g. ``SettingsError`` or ``lambda m: ManifestError(p, f, m)``."""

_CHUNK = 1024 * 1024
DATA_FILE_LIMIT = 1 << 30
"""Most bytes read whole from a dataset's index file (a val map, a labels file, a JSON of samples): the largest
real ones are tens of MiB; a device or a wrong path could otherwise fill the memory."""


class UnusableFile(MLHarnessError):
    """A path where a regular file is expected is missing, or is something else (a FIFO, a device, a folder);
    exit 2 (bad input)."""


class FileTooLarge(UnusableFile):
    """A file is larger than the bound for what it holds; exit 2 (bad input)."""


def describe_kind(mode: int) -> str:
    """'a FIFO', 'a character device', ... for a non-regular ``st_mode``."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


def _subject(path: Path, what: str, name_path: bool) -> str:
    return f"{what} {path}" if name_path else what


def _missing_or_odd(path: Path, what: str, e: OSError, name_path: bool = True) -> str:
    """The message for a path ``stat`` could not follow."""
    what = _subject(path, what, name_path)
    if e.errno == errno.ENOENT:
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return f"{what} is a broken symbolic link (to {os.readlink(path)}); it points at nothing"
        except OSError:
            pass
        return f"{what} does not exist"
    if e.errno == errno.ENOTDIR:
        return f"{what} does not exist (a part of the path is a file, not a folder)"
    if e.errno == errno.ELOOP:
        return f"{what} is a symbolic link loop; it never reaches a file"
    if e.errno == errno.EACCES:
        return f"{what} cannot be read: permission denied"
    return f"{what} cannot be read: {e.strerror or e}"


def _not_regular(path: Path, what: str, mode: int, name_path: bool = True) -> str:
    return (f"{_subject(path, what, name_path)} is {describe_kind(mode)}, not a regular file; "
            "give the path of a regular file")


def check_regular_file(path: Path, what: str, *, error: ErrorFactory = UnusableFile,
                       name_path: bool = True) -> Path:
    """``path`` when it is a regular file (symbolic links followed); otherwise raise ``error`` with a message
    that says whether it does not exist or what it is instead ("model file m.onnx is a FIFO, not a regular
    file"). ``name_path=False`` leaves the path out, for a caller whose error names it already."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise error(_missing_or_odd(path, what, e, name_path)) from None
    if not stat.S_ISREG(st.st_mode):
        raise error(_not_regular(path, what, st.st_mode, name_path))
    return path


def check_file_or_folder(path: Path, what: str, *, error: ErrorFactory = UnusableFile) -> Path:
    """``path`` when it is a regular file or a folder (a dataset may be either); otherwise raise ``error`` saying
    that it does not exist or what it is instead."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise error(_missing_or_odd(path, what, e)) from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise error(f"{what} {path} is {describe_kind(st.st_mode)}, not a file or a folder")
    return path


def open_regular(path: Path, what: str, *, error: ErrorFactory = UnusableFile, name_path: bool = True):
    """A binary file object for ``path``, opened without blocking and checked to be a regular file on the
    open descriptor."""
    path = Path(path)
    # checked before opening too: opening a device can have effects of its own (a tape rewinds)
    check_regular_file(path, what, error=error, name_path=name_path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise error(_missing_or_odd(path, what, e, name_path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(_not_regular(path, what, st.st_mode, name_path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_at_most(f, most: int, size: int) -> bytes:
    """Up to ``most`` bytes of ``f``, asking for the size it has on disk first: ``read(n)`` allocates ``n`` bytes up
    front, so a generous bound (gigabytes) must not be the request size for a file of a few bytes."""
    first = f.read(min(most, size + 1))
    if len(first) <= size or len(first) >= most:  # ended where fstat said, or at the bound
        return first
    parts = [first]  # a file that grows, or whose size reads 0 (/proc)
    got = len(first)
    while got < most:
        chunk = f.read(min(_CHUNK, most - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_bytes_bounded(path: Path, what: str, limit: int, *, error: ErrorFactory = UnusableFile,
                       name_path: bool = True) -> bytes:
    """The content of the regular file ``path``; an error naming ``what`` and the bound when it holds more
    than ``limit`` bytes (only ``limit + 1`` bytes are ever read)."""
    path = Path(path)
    with open_regular(path, what, error=error, name_path=name_path) as f:
        # the size on disk says it at once (a sparse file of terabytes is never read); the bounded read still
        # holds for a file that grows, or one whose size reads 0 (such as those under /proc)
        size = os.fstat(f.fileno()).st_size
        big = size > limit
        data = b"" if big else _read_at_most(f, limit + 1, size)
    if big or len(data) > limit:
        too_large = error if error is not UnusableFile else FileTooLarge
        raise too_large(f"{_subject(path, what, name_path)} is larger than {_human(limit)}, the most read for "
                        "it; check that it is the right file")
    return data


def read_text_bounded(path: Path, what: str, limit: int, *, error: ErrorFactory = UnusableFile) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``limit`` bytes); a file that is not UTF-8 is an
    error naming the line and column of the first bad byte."""
    data = read_bytes_bounded(path, what, limit, error=error)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise error(f"{what} {path} is not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, "
                    f"column {column}") from None


def hash_file(path: Path, what: str, algorithm: str = "sha256", *, error: ErrorFactory = UnusableFile) -> str:
    """Hex digest of the regular file ``path``. Reads no more than the size the file had when opened, so a
    file that keeps growing cannot hold the hash forever."""
    path = Path(path)
    h = hashlib.new(algorithm)
    with open_regular(path, what, error=error) as f:
        left = os.fstat(f.fileno()).st_size
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


# ---- readers of the common formats, each through the checks above -------------------------------------------------

LINE_LIMIT = 64 << 20
"""Most bytes in one line of a line-oriented file (JSON Lines, CSV, a prompt list): the longest real line (a
conversation with its tool outputs, a base64 image) is a few MiB; a file without newlines would otherwise be read
whole into one string."""

JSON_DEPTH_LIMIT = 200
"""Most nesting of arrays and objects in a JSON value: real records are a handful of levels deep; a line of
100,000 ``[`` would otherwise reach the decoder's recursion."""


def _where(path: Path, what: str, line: int | None = None) -> str:
    return f"{what} {path}" + (f", line {line}" if line is not None else "")


def open_text(path: Path, what: str, *, error: ErrorFactory = UnusableFile, encoding: str = "utf-8"):
    """A text file object for the regular file ``path`` (opened as :func:`open_regular` opens it); decoding errors
    are raised, never replaced. For files read whole, prefer :func:`read_text_bounded`."""
    import io

    return io.TextIOWrapper(open_regular(path, what, error=error), encoding=encoding, errors="strict", newline=None)


def iter_lines(path: Path, what: str, *, limit: int = LINE_LIMIT, error: ErrorFactory = UnusableFile):
    """``(line number, text)`` for each line of the regular file ``path``, read as a stream (its line ending
    removed; the first line's UTF-8 byte-order mark too). A line longer than ``limit`` bytes, or one that is not
    UTF-8, is an error naming the file and that line; no more than ``limit + 1`` bytes of a line are ever held."""
    path = Path(path)
    with open_regular(path, what, error=error) as f:
        number = 0
        while True:
            raw = f.readline(limit + 1)
            if not raw:
                return
            number += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise error(f"{_where(path, what, number)} is longer than {_human(limit)}, the most read for one "
                            "line; check that it is the right file")
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise error(f"{_where(path, what, number)} is not UTF-8 text: byte 0x{raw[e.start]:02x} at column "
                            f"{e.start + 1}") from None
            yield number, text.rstrip("\r\n")


def json_depth(text: str | bytes) -> int:
    """How deeply the arrays and objects of the JSON text nest (brackets inside strings not counted); a lower
    bound of 0 when there are fewer brackets than :data:`JSON_DEPTH_LIMIT`, which is all a caller needs."""
    import re

    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") < JSON_DEPTH_LIMIT:
        return 0
    # strings first (the unrolled form, one match per string), then every run of other characters
    brackets = re.sub(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[^\[\]{}"]+', b"", data, flags=re.DOTALL)
    import numpy as np

    steps = np.frombuffer(brackets, dtype=np.uint8)
    depth = np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1), dtype=np.int64)
    return int(depth.max()) if depth.size else 0


def parse_json(text: str | bytes, where: str, *, error: ErrorFactory = UnusableFile, line: int = 1,
               allow_nan: bool = False) -> object:
    """The JSON value of ``text``; ``where`` names its source in errors ("trace t.jsonl, line 4"): a malformed value
    is an error naming the line and column where decoding stopped (counted from ``line``), too deep a nesting one
    naming the bound. Non-standard ``NaN`` and ``Infinity`` are refused, unless ``allow_nan`` (a record mlharness
    wrote with Python's ``json``, whose figures may be NaN)."""
    import json

    if json_depth(text) > JSON_DEPTH_LIMIT:
        raise error(f"{where} nests arrays and objects more than {JSON_DEPTH_LIMIT} deep; refusing to decode it")

    def constant(name: str) -> object:
        raise ValueError(f"{name} is not a JSON number")

    try:
        return json.loads(text) if allow_nan else json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON at line {line + e.lineno - 1}, column {e.colno}: {e.msg}") from None
    except ValueError as e:  # NaN / Infinity, or bytes that are not UTF-8
        raise error(f"{where}: not valid JSON: {e}") from None
    except RecursionError:
        raise error(f"{where} nests arrays and objects too deeply to decode") from None


def read_json(path: Path, what: str, limit: int = DATA_FILE_LIMIT, *, error: ErrorFactory = UnusableFile,
              allow_nan: bool = False) -> object:
    """The JSON value in the regular file ``path`` (at most ``limit`` bytes, UTF-8); errors name the file, and the
    line and column of a malformed value."""
    path = Path(path)
    text = read_text_bounded(path, what, limit, error=error)
    return parse_json(text, f"{what} {path}", error=error, allow_nan=allow_nan)


def iter_jsonl(path: Path, what: str, *, limit: int = LINE_LIMIT, error: ErrorFactory = UnusableFile,
               allow_nan: bool = False):
    """``(line number, value)`` for each non-blank line of the JSON Lines file ``path``, read as a stream; an error
    names the file and the very line at fault (too long, not UTF-8, not JSON, too deep)."""
    path = Path(path)
    for number, text in iter_lines(path, what, limit=limit, error=error):
        if text.strip():
            yield number, parse_json(text, _where(path, what, number), error=error, allow_nan=allow_nan)


def load_npy(path: Path, what: str, limit: int = DATA_FILE_LIMIT * 64, *, error: ErrorFactory = UnusableFile,
             mmap_mode: str | None = None, allow_pickle: bool = False):
    """``numpy.load`` of the regular file ``path`` (``.npy``/``.npz``), never unpickling by default. A truncated or
    malformed file is an error naming it. With ``mmap_mode`` the array is mapped, not read (numpy maps only by path:
    the file is checked first)."""
    import numpy as np

    path = Path(path)
    size = os.stat(check_regular_file(path, what, error=error)).st_size
    if size > limit:
        raise (error if error is not UnusableFile else FileTooLarge)(
            f"{what} {path} is larger than {_human(limit)}, the most read for it; check that it is the right file")
    try:
        if mmap_mode is not None:
            return np.load(path, mmap_mode=mmap_mode, allow_pickle=allow_pickle)
        with open_regular(path, what, error=error) as f:
            loaded = np.load(f, allow_pickle=allow_pickle)
            if isinstance(loaded, np.lib.npyio.NpzFile):
                return {k: loaded[k] for k in loaded.files}
            return loaded
    except (ValueError, OSError, EOFError) as e:
        raise error(f"{what} {path} is not a readable NumPy file: {e}") from None


def torch_load(path: Path, what: str, limit: int = DATA_FILE_LIMIT * 64, *, error: ErrorFactory = UnusableFile,
               map_location: object = "cpu", weights_only: bool = True) -> object:
    """``torch.load`` of the regular file ``path`` (tensors and plain containers only, unless ``weights_only`` is
    turned off for a file mlharness wrote); a file torch cannot read is an error naming it."""
    import torch

    path = Path(path)
    with open_regular(path, what, error=error) as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise (error if error is not UnusableFile else FileTooLarge)(
                f"{what} {path} is larger than {_human(limit)}, the most read for it; check that it is the right file")
        try:  # from the checked descriptor itself: no second copy of the weights in memory
            return torch.load(f, map_location=map_location, weights_only=weights_only)
        except Exception as e:  # torch raises RuntimeError, pickle's UnpicklingError, EOFError, ...
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise error(f"{what} {path} is not a readable torch file: {first}") from None


def open_image(path: Path, what: str, limit: int = 256 << 20, *, error: ErrorFactory = UnusableFile):
    """A Pillow image of the regular file ``path`` (at most ``limit`` bytes, decoded lazily as Pillow does); a file
    that is no image is an error naming it."""
    import io

    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    data = read_bytes_bounded(path, what, limit, error=error)
    try:
        return Image.open(io.BytesIO(data))
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise error(f"{what} {path} is not a readable image: {e}") from None


def read_gzip_bounded(path: Path, what: str, limit: int, *, error: ErrorFactory = UnusableFile) -> bytes:
    """The decompressed content of the gzip file ``path``: at most ``limit`` bytes read, and at most ``limit`` once
    decompressed (a small file can unpack to gigabytes); a file that is not gzip is an error naming it."""
    import gzip
    import io

    path = Path(path)
    data = read_bytes_bounded(path, what, limit, error=error)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as z:
            data = z.read(limit + 1)
    except (OSError, EOFError) as e:
        raise error(f"{what} {path} is not a readable gzip file: {e}") from None
    if len(data) > limit:
        raise error(f"{what} {path} holds more than {_human(limit)} once decompressed; check that it is the right "
                    "file")
    return data
