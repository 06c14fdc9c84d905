"""A socket file at any path: AF_UNIX takes at most 108 bytes of path, which a test's temporary folder under
pytest-xdist (``.../popen-gw0/test_name0/...``) can pass. The socket is bound in a short scratch folder on the
same file system and renamed into place; the file it leaves behind is what the tests need."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path


def socket_file(path: Path) -> None:
    scratch = tempfile.mkdtemp(prefix="s")  # /tmp: where pytest keeps its folders too, so the rename stays on one file system
    short = os.path.join(scratch, "s")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(short)
    finally:
        s.close()  # the socket file stays
    os.rename(short, path)
    os.rmdir(scratch)
