"""Atomic file writes for the files tasks generate (models, synthetic data, caches)."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from mlharness.fileguard import UnusableFile, read_json


def atomic_write(path: Path | str, write: Callable[[str], object], *, suffix: str = "") -> Path:
    """Create ``path`` all at once: ``write(tmp)`` fills a temporary file in the same folder (named with
    ``suffix``, for libraries that add or expect an extension: ``.npz``, ``.npy``, ``.onnx``, ``.pt``), which is
    then renamed into place, so a reader never sees half a file. On any failure the temporary file is removed
    and the exception propagates; ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: Path | str, data: bytes) -> Path:
    """:func:`atomic_write` of ``data``."""
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def _stamp(path: Path) -> Path:
    return path.with_name(f".{path.name}.generated")


def reuse_generated(path: Path | str, recipe: str) -> bool:
    """True when ``path`` still holds the file :func:`mark_generated` recorded for ``recipe``: the stamp beside it
    names the same recipe, and the file is a regular file of the size and modification time it had when it was
    written. A generator asks this before importing its framework to look inside the file (importing onnx alone
    takes longer than a short run's LoadGen test); a file without a stamp, or changed since, is checked the long
    way or written again."""
    path = Path(path)
    try:
        st = os.lstat(path)
        seen = read_json(_stamp(path), "generated model's stamp", 4096)
    except (OSError, UnusableFile):
        return False
    return (stat.S_ISREG(st.st_mode) and isinstance(seen, dict) and seen.get("recipe") == recipe
            and seen.get("size") == st.st_size and seen.get("mtime_ns") == st.st_mtime_ns)


def mark_generated(path: Path | str, recipe: str) -> Path:
    """Record that ``path`` was just written (or checked the long way) for ``recipe``: see :func:`reuse_generated`.
    Returns ``path``."""
    path = Path(path)
    st = os.lstat(path)
    stamp = {"recipe": recipe, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    atomic_write_bytes(_stamp(path), json.dumps(stamp).encode())
    return path

