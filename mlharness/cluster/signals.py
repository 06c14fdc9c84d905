"""SIGINT/SIGTERM while an executor runs work: every run in flight is stopped within seconds, then the command
ends with exit status 130/143.

``cluster/`` does not import the run's signal guard (``mlharness/loadgen/interrupt.py``: its runs are processes on
their nodes), so a driver wraps ``run_all`` in :func:`cancel_on_signals`, which holds the two signals for the
block (and hands them back to whatever handled them before, the CLI's guard included). The handler only starts
``executor.cancel()`` on a thread: a signal handler must return at once, and ``run_all`` notices the cancel within
a poll and returns the outcomes (cancelled runs failed, saying so); :class:`Cancelled` is raised after it.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Cancelled(KeyboardInterrupt):
    """The driver was interrupted; every run in flight was stopped. ``exit_code`` is 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum

    def __str__(self) -> str:
        return (f"interrupted by {signal.Signals(self.signum).name}: every run in flight was stopped; the runs "
                "that had finished are in place")


@dataclass
class Stop:
    """What :func:`cancel_on_signals` yields: the first signal received within the block, if any."""

    signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None


@contextmanager
def cancel_on_signals(executor: Any) -> Iterator[Stop]:
    """Within the block, SIGINT/SIGTERM cancel ``executor`` (a no-op off the main thread, where Python cannot
    install handlers); :class:`Cancelled` is raised once the block has ended, also when the block raised because
    its runs were stopped (a submission step whose run was cancelled fails): the command ends 130/143 either way.

    A wake-up fd installed before (the CLI's signal guard watches one, to exit when a signal finds the main thread
    stuck in C code) is set aside for the block: here the main thread only waits on the executor, and the watcher
    would end the process before the cancelled runs are recorded."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
        if stop.signum is None:
            stop.signum = signum
            print(f"{signal.Signals(signum).name}: stopping every run in flight", file=sys.stderr, flush=True)
        threading.Thread(target=executor.cancel, name="mlharness-cancel", daemon=True).start()

    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    wakeup = signal.set_wakeup_fd(-1)
    try:
        yield stop
    except BaseException as e:
        if stop.signum is not None and not isinstance(e, Cancelled):
            raise Cancelled(stop.signum) from e
        raise
    finally:
        signal.set_wakeup_fd(wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if stop.signum is not None:
        raise Cancelled(stop.signum)
