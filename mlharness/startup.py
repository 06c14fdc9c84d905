"""Signals while the ``mlharness`` command starts.

Importing the command's modules takes a second or more on a busy host, and nothing has been written yet: a Ctrl-C
(or SIGTERM) then ends the process at once with one line and the shell's status (130, 143), not a
``KeyboardInterrupt`` traceback from whichever import it hit. :func:`started` hands the signals back to the command,
whose own handling (``mlharness.cli.main``, ``mlharness.loadgen.interrupt``) takes over from there.
"""

from __future__ import annotations

# _signal, not signal: the C module is already loaded, while ``import signal`` (enum, ...) takes milliseconds in
# which a Ctrl-C would still be a KeyboardInterrupt; nothing else is imported here for the same reason
import _signal
import atexit
import os
import sys

NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM"}
_previous: dict[int, object] = {}
_leaving: list[int] = []  # the exit status of a command a signal ended
_registered: list[bool] = []


def _exit(signum: int, frame: object) -> None:  # noqa: ARG001 - signal handler signature
    try:  # os.write: the signal may have interrupted a print
        os.write(2, f"error: interrupted by {NAMES[signum]} while mlharness was starting\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


def guard() -> None:
    """Until :func:`started`, SIGINT and SIGTERM end the process at once (call it first, on the main thread)."""
    if not _registered:  # the first exit handler registered runs last, after every other one
        _registered.append(True)
        atexit.register(_skip_finalization)
    if not _previous:
        for sig in NAMES:
            _previous[sig] = _signal.signal(sig, _exit)


def started() -> None:
    """The command is ready to handle signals itself: put back the handlers :func:`guard` replaced."""
    for sig, previous in _previous.items():
        _signal.signal(sig, previous if previous is not None else _signal.SIG_DFL)
    _previous.clear()


def leave(status: int) -> None:
    """End the command with ``status``. After a signal (130, 143) the interpreter's finalization is skipped once
    the exit handlers have run: the output is written and kept by then, and tearing down a loaded framework
    (torch, transformers) takes seconds on a busy host, which would break the promise that a signal ends a run
    within about 3 s."""
    if status in (128 + _signal.SIGINT, 128 + _signal.SIGTERM):
        _leaving.append(status)
    sys.exit(status)


def _skip_finalization() -> None:
    if _leaving:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(_leaving[0])
