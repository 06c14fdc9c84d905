"""SIGINT and SIGTERM during a run: stop within seconds, keep the partial output, exit 130 / 143.

Python runs signal handlers on the main thread only, and only while it executes Python code; LoadGen's
``StartTest`` releases the GIL and does not return until the test has ended, so a handler would wait for the
whole test. A LoadGen test therefore runs on a worker thread (:func:`run_test_thread`) while the main thread
waits in short ``join`` slices and handles signals. What a signal does depends on what is running:

- a LoadGen test: the SUT is put into drain mode (every issued sample, and every sample issued later, is
  completed at once with an empty response) so LoadGen ends its test by itself; a test that runs a schedule
  (Server, or a long SingleStream/MultiStream duration) cannot end early, so when LoadGen is still running
  :data:`GRACE_S` seconds later the partial output is kept and the process exits;
- a child process (``submission run`` runs each LoadGen test in its own): the signal is forwarded to it, and
  the child does the above;
- anything else (loading a manifest or a model, scoring accuracy): :class:`Interrupted` is raised on the main
  thread, like ``KeyboardInterrupt``.

A second SIGINT exits at once (exit status 130), after moving every staging folder to ``<name>.failed-<time>``.
Nothing here touches LoadGen's threads: the exit paths end the process with ``os._exit``, so no C++ object is
destroyed while LoadGen still calls back into Python.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

GRACE_S = 3.0  # after a signal, how long LoadGen may take to end its test before the process exits anyway
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal. A ``KeyboardInterrupt``, so that no ``except Exception`` swallows it;
    ``exit_code`` is the shell's 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int, kept: Path | None = None):
        super().__init__(signum)
        self.signum = signum
        self.kept = kept  # where the run's partial output was moved, once it was

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name

    def __str__(self) -> str:
        text = f"the run was interrupted by {self.signame}"
        if self.kept is not None:
            text += f"; its partial output is in {self.kept}"
        return text


def _say(text: str) -> None:
    """One line on stderr, written with os.write: safe inside a signal handler that interrupted a print."""
    try:
        os.write(2, (text.rstrip("\n") + "\n").encode(errors="replace"))
    except OSError:
        pass


class Guard:
    """The process's SIGINT/SIGTERM handlers and what they act on (one instance: :data:`GUARD`)."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received
        self.grace_s = GRACE_S
        self._installed = 0
        self._previous: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._keepers: list[Callable[[], Path]] = []  # move a staging folder aside; return where it went
        self._drain: Callable[[Interrupted], None] | None = None  # the running LoadGen test's SUT
        self._test_over: threading.Event | None = None
        self._children: list[Any] = []  # subprocess.Popen of child runs
        self._deferring = 0  # inside deferred(): a first signal is raised at the end of the block
        self._deferred: int | None = None

    # -- installation ------------------------------------------------------------------------------------------
    @contextmanager
    def installed(self) -> Iterator[Guard]:
        """Handle SIGINT and SIGTERM for the block (nestable; a no-op off the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        if self._installed == 0:
            self.signum = None
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        self._installed += 1
        try:
            yield self
        finally:
            self._installed -= 1
            if self._installed == 0:
                for sig, previous in self._previous.items():
                    signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
                self._previous.clear()

    # -- what a signal acts on ---------------------------------------------------------------------------------
    def add_keeper(self, keep: Callable[[], Path]) -> None:
        with self._lock:
            self._keepers.append(keep)

    def remove_keeper(self, keep: Callable[[], Path]) -> None:
        with self._lock:
            if keep in self._keepers:
                self._keepers.remove(keep)

    @contextmanager
    def child(self, proc: Any) -> Iterator[None]:
        """While the block waits for ``proc``, signals are forwarded to it instead of interrupting this process."""
        self._children.append(proc)
        try:
            yield
        finally:
            self._children.remove(proc)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A block that must not be cut in two (swapping a result folder into place): a signal arriving meanwhile
        raises :class:`Interrupted` once the block has finished."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if self._deferring == 0 and self._deferred is not None:
            signum, self._deferred = self._deferred, None
            raise Interrupted(signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` when a signal arrived (e.g. between two child runs)."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    # -- the handler -------------------------------------------------------------------------------------------
    def _handle(self, signum: int, frame: Any) -> None:  # noqa: ARG002 - signal handler signature
        name = signal.Signals(signum).name
        first = self.signum is None
        if self._children:
            if first:
                self.signum = signum
            for proc in list(self._children):
                try:
                    proc.send_signal(signum)
                except OSError:
                    pass
            return
        if not first:
            if signum == signal.SIGINT:
                self.exit_now(signum, f"interrupted again by {name}: exiting at once")
            return  # a repeated SIGTERM changes nothing: the run is already stopping
        self.signum = signum
        if self._drain is not None:
            _say(f"interrupted by {name}: stopping the run and keeping its logs "
                 f"(press Ctrl-C again to exit at once)")
            self._drain(Interrupted(signum))
            over = self._test_over
            threading.Thread(target=self._deadline, args=(signum, over), name="mlharness-interrupt",
                             daemon=True).start()
            return
        if self._deferring:
            self._deferred = signum
            return
        raise Interrupted(signum)

    def _deadline(self, signum: int, over: threading.Event | None) -> None:
        if over is not None and over.wait(self.grace_s):
            return
        self.exit_now(signum, f"interrupted by {signal.Signals(signum).name}: LoadGen was still running its "
                              f"schedule {self.grace_s:g} s later, so mlharness stopped it")

    def exit_now(self, signum: int, reason: str) -> None:
        """Keep every staging folder as ``*.failed-<time>``, say where it went, and end the process."""
        with self._lock:
            keepers = list(self._keepers)
        kept = []
        for keep in keepers:
            try:
                kept.append(str(keep()))
            except BaseException as e:  # noqa: BLE001 - exiting anyway; say what could not be kept
                kept.append(f"(could not be moved: {e})")
        _say(f"error: {reason}." + (f" Partial output: {', '.join(kept)}" if kept else ""))
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001, S110 - a flush must not stop the exit
            pass
        os._exit(128 + signum)

    # -- a LoadGen test ----------------------------------------------------------------------------------------
    def run_test(self, start_test: Callable[[], None], drain: Callable[[Interrupted], None]) -> None:
        """``start_test()`` (LoadGen's StartTest) on a worker thread while this thread handles signals; a signal
        calls ``drain``. Exceptions of ``start_test`` are re-raised here."""
        if self.signum is not None:
            drain(Interrupted(self.signum))  # a signal arrived just before the test: no model runs
        failure: list[BaseException] = []

        def target() -> None:
            try:
                start_test()
            except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
                failure.append(e)

        over = threading.Event()
        worker = threading.Thread(target=target, name="mlharness-loadgen", daemon=True)
        with self.installed():
            self._drain, self._test_over = drain, over
            try:
                worker.start()
                while worker.is_alive():
                    worker.join(0.2)
            finally:
                over.set()
                self._drain, self._test_over = None, None
        if failure:
            raise failure[0]


GUARD = Guard()


def handle_signals(enabled: bool = True) -> Any:
    """The CLI's context manager: SIGINT/SIGTERM handled as described above for the command's duration."""
    if not enabled:
        return _nothing()
    return GUARD.installed()


@contextmanager
def _nothing() -> Iterator[None]:
    yield
