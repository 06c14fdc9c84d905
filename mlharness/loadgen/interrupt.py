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

A second SIGINT exits at once (exit status 130), after moving every staging folder to ``<name>.failed-<time>``;
so does a signal the main thread cannot handle within :data:`GRACE_S` because it is blocked in C code (a
framework loading a model), noticed by a thread woken through ``signal.set_wakeup_fd``.
Nothing here touches LoadGen's threads: the exit paths end the process with ``os._exit``, so no C++ object is
destroyed while LoadGen still calls back into Python.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlharness.manifest.hookguard import hard_exit

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
        self._scratch: list[Path] = []  # temporary folders removed before an exit at once
        self._drain: Callable[[Interrupted], None] | None = None  # the running LoadGen test's SUT
        self._test_over: threading.Event | None = None
        self._children: list[Any] = []  # subprocess.Popen of child runs
        self._deferring = 0  # inside deferred(): a first signal is raised at the end of the block
        self._pipe: tuple[int, int] | None = None  # the wake-up pipe of the watcher thread
        self._wakeup_previous = -1
        self._received = 0  # signals the watcher saw / the handler ran for
        self._handled = 0
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
            self._watch_start()
        self._installed += 1
        try:
            yield self
        finally:
            self._installed -= 1
            if self._installed == 0:
                self._watch_stop()
                for sig, previous in self._previous.items():
                    signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
                self._previous.clear()

    # -- a main thread stuck in C code ---------------------------------------------------------------------------
    def _watch_start(self) -> None:
        """Python runs the handler only once the main thread is back in Python code; a framework loading a
        model can keep it in C code for a long time. The signal's wake-up byte reaches a watcher thread at
        once: when the handler has not run ``grace_s`` later, the watcher keeps the partial output and exits.
        (C code that holds the GIL the whole time stops the watcher too; nothing in Python can end that.)"""
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            self._wakeup_previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):  # not the main thread of the main interpreter
            os.close(r)
            os.close(w)
            self._pipe = None
            return
        self._pipe = (r, w)
        self._received = self._handled = 0
        threading.Thread(target=self._watch, args=(r,), name="mlharness-signal-watch", daemon=True).start()

    def _watch_stop(self) -> None:
        if self._pipe is None:
            return
        r, w = self._pipe
        self._pipe = None
        signal.set_wakeup_fd(self._wakeup_previous)
        os.close(w)  # the watcher reads EOF and closes its end

    def _watch(self, r: int) -> None:
        try:
            while True:
                data = os.read(r, 64)
                if not data:
                    return
                ours = [b for b in data if b in SIGNALS]
                if not ours:
                    continue
                self._received += len(ours)
                deadline = time.monotonic() + self.grace_s
                while self._handled < self._received and time.monotonic() < deadline:
                    time.sleep(0.05)
                if self._handled < self._received:
                    self.exit_now(ours[-1], f"interrupted by {signal.Signals(ours[-1]).name} while mlharness was "
                                            f"busy outside Python (loading a model?) for {self.grace_s:g} s")
        except OSError:
            return
        finally:
            try:
                os.close(r)
            except OSError:
                pass

    # -- what a signal acts on ---------------------------------------------------------------------------------
    def add_keeper(self, keep: Callable[[], Path]) -> None:
        with self._lock:
            self._keepers.append(keep)

    def remove_keeper(self, keep: Callable[[], Path]) -> None:
        with self._lock:
            if keep in self._keepers:
                self._keepers.remove(keep)

    @contextmanager
    def scratch(self, path: Path) -> Iterator[Path]:
        """A temporary folder, removed when the block ends and also when the process exits at once (a second
        Ctrl-C, LoadGen past its grace time, a hook past its deadline), where no ``finally`` runs."""
        with self._lock:
            self._scratch.append(path)
        try:
            yield path
        finally:
            with self._lock:
                if path in self._scratch:
                    self._scratch.remove(path)
            shutil.rmtree(path, ignore_errors=True)

    def remove_scratch(self) -> list[Path]:
        """Remove every registered temporary folder (the process is about to exit at once); the folders."""
        with self._lock:
            folders, self._scratch = list(self._scratch), []
        for path in folders:
            shutil.rmtree(path, ignore_errors=True)
        return folders

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
        self._handled += 1
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
            self._stop_test(signum)
            return
        if self._deferring:
            self._deferred = signum
            return
        raise Interrupted(signum)

    def _stop_test(self, signum: int) -> None:
        """Drain the running test's SUT and give LoadGen ``grace_s`` to end the test."""
        _say(f"interrupted by {signal.Signals(signum).name}: stopping the run and keeping its logs "
             f"(press Ctrl-C again to exit at once)")
        assert self._drain is not None
        self._drain(Interrupted(signum))
        threading.Thread(target=self._deadline, args=(signum, self._test_over), name="mlharness-interrupt",
                         daemon=True).start()

    def _deadline(self, signum: int, over: threading.Event | None) -> None:
        if over is not None and over.wait(self.grace_s):
            return
        self.exit_now(signum, f"interrupted by {signal.Signals(signum).name}: LoadGen was still running its "
                              f"schedule {self.grace_s:g} s later, so mlharness stopped it")

    def keep_all(self) -> list[str]:
        """Move every registered staging folder to ``*.failed-<time>`` (before the process ends at once); where
        each went, or why it could not be moved."""
        with self._lock:
            keepers = list(self._keepers)
        kept = []
        for keep in keepers:
            try:
                kept.append(str(keep()))
            except BaseException as e:  # noqa: BLE001 - exiting anyway; say what could not be kept
                kept.append(f"(could not be moved: {e})")
        return kept

    def exit_now(self, signum: int, reason: str) -> None:
        """Keep every staging folder as ``*.failed-<time>``, say where it went, and end the process."""
        kept = self.keep_all()
        removed = self.remove_scratch()  # partial output kept inside one of them went with it
        kept = [k for k in kept if not any(Path(k).is_relative_to(folder) for folder in removed)]
        _say(f"error: {reason}." + (f" Partial output: {', '.join(kept)}" if kept else ""))
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001, S110 - a flush must not stop the exit
            pass
        hard_exit(128 + signum)  # the real os._exit, even on a thread that is running a hook

    # -- a LoadGen test ----------------------------------------------------------------------------------------
    def run_test(self, start_test: Callable[[], None], drain: Callable[[Interrupted], None]) -> None:
        """``start_test()`` (LoadGen's StartTest) on a worker thread while this thread handles signals; a signal
        calls ``drain``. Exceptions of ``start_test`` are re-raised here."""
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
            if self.signum is not None:  # a signal arrived just before the test: no model runs
                self._stop_test(self.signum)
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
