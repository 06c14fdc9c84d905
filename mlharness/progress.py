"""Progress bars for loading samples and for the LoadGen run, drawn from a polling thread so the timed path
only bumps counters it already keeps."""

from __future__ import annotations

import threading
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)


class RunProgress:
    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=self.console, transient=False, disable=not self.enabled,
        )
        self._load_task: Any = None
        self._run_task: Any = None
        self._sut: Any = None
        self._total: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False

    def _start(self) -> None:
        if not self._started:
            self._progress.start()
            self._started = True

    def load(self, done: int, total: int) -> None:
        self._start()
        if self._load_task is None:
            self._load_task = self._progress.add_task("loading samples", total=total)
        self._progress.update(self._load_task, completed=done, total=total)

    def attach(self, sut: Any, total: int | None) -> None:
        self._start()
        self._sut, self._total = sut, total
        self._run_task = self._progress.add_task("running", total=total)
        self._thread = threading.Thread(target=self._poll, name="mlharness-progress", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            self._refresh()

    def _refresh(self) -> None:
        sut = self._sut
        total = self._total if self._total is not None else max(sut.issued, 1)
        self._progress.update(self._run_task, completed=sut.completed, total=total)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._refresh()
        if self._started:
            self._progress.stop()
