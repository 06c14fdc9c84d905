"""Progress of a run: the up-front estimate, then progress bars on a terminal or, when the output is not one (logs,
CI, batch jobs), a first line after 5 s (10% of the estimate for long runs) and then one every
``$MLHARNESS_PROGRESS_INTERVAL_S`` seconds (default 30), so a short piped run still shows how far it got.

Drawn from one polling thread, so the timed path only bumps the counters the SUT keeps anyway (``sut.completed``,
a plain integer) and the loader reports every 16 samples.
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from mlharness.calibration.estimate import Estimate, estimate_run, format_duration, rate_from

INTERVAL_ENV = "MLHARNESS_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S = 30.0
FIRST_LINE_S = 5.0  # the first line, at the latest (runs over 50 s: 10% of the estimate)
BAR_REFRESH_S = 0.2
# an estimate without a time (an accuracy run: no measured rate) gets one from the first samples done over this
FIRST_RATE_S = 1.0


class RateColumn(ProgressColumn):
    """Samples per second over rich's recent window (``task.speed``); a dash until two updates have been seen."""

    def render(self, task: Any) -> Text:
        speed = task.speed
        return Text(f"{speed:,.1f} samples/s" if speed is not None else "- samples/s", style="progress.data.speed")


class RemainingColumn(TimeRemainingColumn):
    """rich's time remaining (at the recent rate), said as such: ``0:00:12 left``."""

    def render(self, task: Any) -> Text:
        text = super().render(task)
        text.append(" left")
        return text


def line_interval_s() -> float:
    try:
        return max(float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_S)), 0.05)
    except ValueError:
        return DEFAULT_INTERVAL_S


class RunProgress:
    """``live=False`` (``--no-progress``): only the estimate line."""

    def __init__(self, console: Console | None = None, live: bool = True, interval_s: float | None = None):
        self.console = console or Console(stderr=True)
        self.bars = live and self.console.is_terminal
        self.lines = live and not self.console.is_terminal
        self.interval_s = interval_s if interval_s is not None else line_interval_s()
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), RateColumn(),
            TimeElapsedColumn(), RemainingColumn(), console=self.console, transient=False, disable=not self.bars,
        )
        self._load_task: Any = None
        self._run_task: Any = None
        self._sut: Any = None
        self._total: int | None = None
        self._loaded = (0, 0)
        self._estimate: Estimate | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._t0 = time.monotonic()
        self._mark: tuple[float, int] | None = None  # (time, completed) at the run's first line

    def _start(self) -> None:
        if self.bars and not self._started:
            self._progress.start()
            self._started = True

    def load(self, done: int, total: int) -> None:
        self._loaded = (done, total)
        if not self.bars:
            return
        self._start()
        if self._load_task is None:
            self._load_task = self._progress.add_task("loading samples", total=total)
        self._progress.update(self._load_task, completed=done, total=total)

    def attach(self, sut: Any, total: int | None, settings: Any = None) -> None:
        """Before LoadGen starts: print the estimate (from the effective TestSettings) and start the display.
        ``total``: the samples an accuracy run issues (None in performance mode: the estimate's count). A run
        that plays the test a second time attaches again after :meth:`close`."""
        self._sut, self._total = sut, total
        self._stop.clear()
        self._mark = None
        if settings is not None:
            self._estimate = estimate_run(settings, total)
            self.console.print(escape(self._estimate.line()), highlight=False, soft_wrap=True)
            if total is None:
                self._total = self._estimate.samples
        if not (self.bars or self.lines):
            return
        self._start()
        if self.bars:
            self._run_task = self._progress.add_task("running", total=self._total or None)
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._poll, name="mlharness-progress", daemon=True)
        self._thread.start()

    def first_line_s(self) -> float:
        """When the first progress line of a piped run comes: soon enough that a 10 s run prints one."""
        seconds = self._estimate.seconds if self._estimate is not None else None
        first = max(FIRST_LINE_S, 0.1 * seconds) if seconds else FIRST_LINE_S
        return min(self.interval_s, first)

    def _poll(self) -> None:
        if self.bars:
            while not self._stop.wait(BAR_REFRESH_S):
                self._refresh()
            return
        wait = self.first_line_s()
        if self._estimate is not None and self._estimate.seconds is None:
            self._first_rate(wait)
            wait = max(wait - (time.monotonic() - self._t0), BAR_REFRESH_S)
        while not self._stop.wait(wait):
            self._line()
            wait = self.interval_s

    def _first_rate(self, within_s: float) -> None:
        """For logs, an estimate that had no time: one line with the rate of the run's first samples, and the
        time left at that rate, once they have been completing for FIRST_RATE_S (within ``within_s``)."""
        first: tuple[float, int] | None = None
        while not self._stop.wait(BAR_REFRESH_S) and time.monotonic() - self._t0 < within_s:
            now, done = time.monotonic(), self._sut.completed
            if first is None or done == 0:
                first = (now, done) if done else None
                continue
            total = self._total or 0
            if now - first[0] >= FIRST_RATE_S and first[1] < done < total:
                rate = (done - first[1]) / (now - first[0])
                scenario = self._estimate.scenario if self._estimate is not None else ""
                self.console.print(f"{scenario} accuracy run at "
                                   f"{rate_from(rate, 'samples/s', f'the first {done:,} samples')}: about "
                                   f"{format_duration((total - done) / rate)} left", highlight=False, markup=False,
                                   soft_wrap=True)
                return

    def _refresh(self) -> None:
        sut = self._sut
        if self._run_task is None or sut is None:
            return
        total = self._total if self._total else max(sut.issued, 1)
        self._progress.update(self._run_task, completed=sut.completed, total=max(total, sut.completed))

    def _line(self) -> None:
        """One progress line for logs: loading, then samples completed of the expected total."""
        sut = self._sut
        now = time.monotonic()
        done, issued = sut.completed, sut.issued
        loaded, to_load = self._loaded
        if issued == 0 and (not to_load or loaded < to_load):
            text = (f"loading samples: {loaded:,} / {to_load:,} ({100 * loaded / to_load:.0f}%)" if to_load else
                    "loading samples") + f", {format_duration(now - self._t0)} elapsed"
        else:
            if self._mark is None and issued:
                self._mark = (now, done)
            total = self._total or issued
            approx = "~" if self._estimate is not None and self._estimate.at_least else ""
            text = f"progress: {done:,} / {approx}{total:,} samples completed"
            if total:
                text += f" ({min(100 * done / total, 100):.0f}%)"
            text += f", {format_duration(now - self._t0)} elapsed"
            t_mark, done_mark = self._mark or (now, done)
            if done_mark < done:  # the rate since the first line of the run, and the time left at that rate
                rate = (done - done_mark) / max(now - t_mark, 1e-9)
                text += f", {rate:,.1f} samples/s"
                if done < total:
                    text += f", about {format_duration((total - done) / rate)} left"
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            if self.bars:
                self._refresh()
        if self._started:
            self._progress.stop()
            self._started = False


# spaces that pad a line to the width of the widest row, before any closing style codes
_PAD = re.compile(r" +((?:\x1b\[[0-9;]*m)*)\n")


class _Unpadded(io.TextIOBase):
    """stdout or stderr (looked up at each write, so a replaced ``sys.stderr`` is followed) without the spaces
    rich pads every row of a table with: piped tables are as wide as their content, not the console's width."""

    def __init__(self, stderr: bool):
        self._stderr = stderr
        self._tail = ""  # spaces at the end of an unfinished line: padding if a newline follows

    @property
    def stream(self) -> Any:
        return sys.stderr if self._stderr else sys.stdout

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        joined = _PAD.sub(r"\1\n", self._tail + text)
        body = joined.rstrip(" ")
        self._tail = joined[len(body):]
        self.stream.write(body)
        return len(text)

    def flush(self) -> None:
        if self._tail:
            self.stream.write(self._tail)
            self._tail = ""
        self.stream.flush()


def output_console(stderr: bool = False) -> Console:
    """The CLI's console: a terminal's own width; piped (logs, CI), lines up to 200 columns instead of rich's
    80-column wrapping, and tables sized to their content. Emoji codes are off: text from users (names, paths,
    error messages) is printed as written, ':-1:' or ':smile:' included."""
    if (sys.stderr if stderr else sys.stdout).isatty():
        return Console(stderr=stderr, soft_wrap=True, emoji=False)
    return Console(file=_Unpadded(stderr), soft_wrap=True, width=200, emoji=False)
