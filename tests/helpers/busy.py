"""Another process keeping one core busy for the length of a block, as other jobs on a shared host do."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


@contextmanager
def busy_core(on: bool = True, seconds: float = 240) -> Iterator[None]:
    """A spinning process (ending by itself after ``seconds`` at the latest) while the block runs, when ``on``."""
    if not on:
        yield
        return
    hog = subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)])
    try:
        time.sleep(0.2)  # the loop is spinning before anything is measured
        yield
    finally:
        hog.kill()
        hog.wait(timeout=10)
