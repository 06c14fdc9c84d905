"""A run folder as bytes, from a node to the driver (no shared file system is assumed), within a bound.

A run folder is LoadGen's logs, the accuracy log and the run's metadata: megabytes, rarely more. Past
:func:`ship_limit` (``MLHARNESS_CLUSTER_SHIP_MB``, 512 MB by default: the folder travels through Ray's object
store) the run is not brought back whole: its files of at most :data:`SMALL_FILE_BYTES` (the logs, the summary,
the metadata) come back as a ``.failed-*`` folder with ``NOT_SHIPPED.txt`` listing the rest, and the full folder
stays on the node, at the path that file names.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

DEFAULT_SHIP_MB = 512
SMALL_FILE_BYTES = 1 << 20
NOT_SHIPPED = "NOT_SHIPPED.txt"


def ship_limit() -> int:
    try:
        return int(float(os.environ.get("MLHARNESS_CLUSTER_SHIP_MB", DEFAULT_SHIP_MB)) * (1 << 20))
    except ValueError:
        return DEFAULT_SHIP_MB << 20


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def pack(folder: Path, only_small: bool = False) -> bytes:
    """The folder's regular files as a gzip'd tar (names relative to the folder); symlinks are left out."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            if only_small and path.stat().st_size > SMALL_FILE_BYTES:
                continue
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buf.getvalue()


def pack_bounded(folder: Path, node: str, limit: int | None = None) -> tuple[bytes, str | None]:
    """The folder packed, or (past the bound) its small files plus a note; the second value says why the folder
    did not come back whole (None when it did)."""
    limit = ship_limit() if limit is None else limit
    size = folder_bytes(folder)
    if size <= limit:
        return pack(folder), None
    big = [f"{p.relative_to(folder)} ({p.stat().st_size} bytes)" for p in sorted(folder.rglob("*"))
           if p.is_file() and not p.is_symlink() and p.stat().st_size > SMALL_FILE_BYTES]
    why = (f"the run folder is {size / (1 << 20):.0f} MB, over the {limit / (1 << 20):.0f} MB that is shipped back "
           f"(MLHARNESS_CLUSTER_SHIP_MB); its logs came back, the full folder is kept on node {node} at {folder}")
    (folder / NOT_SHIPPED).write_text(why + "\nnot shipped:\n" + "\n".join(big) + "\n")
    return pack(folder, only_small=True), why


def unpack(data: bytes, into: Path) -> None:
    """Extract into an existing folder; members that would leave it (absolute, '..', links) are refused by the
    'data' filter."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(into, filter="data")
