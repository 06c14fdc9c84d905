"""One measured run at a time on a host: the runs an executor starts (``campaign run``, ``submission run``
with or without ``--cluster``, ``sweep --cluster``) take turns on the physical host they run on.

Several Ray nodes may live on one machine (a test cluster, containers, one node per GPU): their runs would all
start at once and measure each other (a TEST01 reference run sharing the CPU with another run fails its
performance compare). Each run's process is therefore started only once it holds an exclusive ``flock`` on
:data:`LOCK_FILE` in the per-user cache root (:func:`mlharness.manifest.assets.cache_dir`: ``$MLHARNESS_CACHE``,
else ``~/.cache/mlharness``), held until the process has ended; a run that has to wait says so once, naming the
run it waits for. The lock is the kernel's: a holder that dies releases it. Two processes with different caches
(separate test sessions) do not wait for each other.

``--share-host`` (``campaign run``, ``submission run``; a job's :attr:`~mlharness.cluster.jobs.RunJob.share_host`)
lets runs share the host. A plain ``mlharness run`` takes no turn: it is started by hand, where the user decides
what else runs.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

LOCK_FILE = "host-runs.lock"
POLL_S = 0.1  # how often a waiting run tries again (and looks whether it was stopped meanwhile)


def lock_file() -> Path:
    from mlharness.manifest.assets import cache_dir

    return cache_dir() / LOCK_FILE


class HostTurn:
    """The host's turn of one run: :meth:`take` waits for it, :meth:`release` gives it back. ``holder`` says who
    holds it (written into the lock file, so a run that waits can name it)."""

    def __init__(self, holder: str, path: Path | None = None):
        self.holder = holder
        self.path = path
        self.fd: int | None = None

    def take(self, say: Callable[[str], None], stopped: Callable[[], bool] = lambda: False) -> bool:
        """Wait until no other run holds the host; True once held, False when ``stopped()`` ended the wait. A lock
        file that cannot be opened is said once and the run goes ahead: it is no reason to fail a run."""
        try:
            self.path = self.path or lock_file()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            say(f"{self.holder}: the host's run lock {self.path or LOCK_FILE} cannot be opened "
                f"({e.strerror or e}): it runs without waiting for other runs on this host")
            return True
        said = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                if not said:
                    other = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another mlharness run"
                    say(f"{self.holder} waits for its turn on this host: {other} is running here (one run at a "
                        f"time per host; --share-host lets runs share it; lock {self.path})")
                    said = True
                if stopped():
                    os.close(fd)
                    return False
                time.sleep(POLL_S)
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.holder} (pid {os.getpid()})\n".encode(errors="replace"), 0)
        self.fd = fd
        return True

    def release(self) -> None:
        """Give the turn back (the lock file stays: removing it would let two runs lock two files)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            os.close(fd)
