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


@contextmanager
def cancel_on_signals(executor: Any) -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM cancel ``executor`` (a no-op off the main thread, where Python cannot
    install handlers); :class:`Cancelled` is raised once the block has returned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
        if not received:
            print(f"{signal.Signals(signum).name}: stopping every run in flight", file=sys.stderr, flush=True)
        received.append(signum)
        threading.Thread(target=executor.cancel, name="mlharness-cancel", daemon=True).start()

    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if received:
        raise Cancelled(received[0])
