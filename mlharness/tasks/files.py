"""Atomic file writes for the files tasks generate (models, synthetic data, caches)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


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
