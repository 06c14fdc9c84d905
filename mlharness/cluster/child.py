"""One run job as one ``mlharness`` process, the same on every backend: the job's files written into a working
folder, ``<python> -m mlharness.cli <argv> --output <work>/run`` started there in a process group of its own, its
console kept in ``<work>/console.log``.

The run writes its own folder the way every local run does (staged, moved into place only when it succeeded, a
failed run's partial output kept as ``run.failed-<time>``: ``mlharness/run/rundir.py``), so the executor only has
to find which of the two exists and bring it home.

A run is stopped the way a user stops one: SIGINT to its process group (it drains LoadGen and keeps its partial
output), SIGKILL to the group :data:`KILL_AFTER_S` seconds later. A watcher process kills the group when the
process that started the run dies (a Ray worker killed by ``ray.cancel(force=True)``, or by its node going down),
so no run outlives the task that owns it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mlharness.cluster.hostlock import HostTurn
from mlharness.cluster.jobs import RunJob

KILL_AFTER_S = 5.0  # after SIGINT, how long a run may take to keep its partial output before SIGKILL
CONSOLE = "console.log"  # the run's stdout and stderr, shipped with a failed run's partial output

# Run with ``python -S -c``: polls the owner's pid and kills the run's process group once the owner is gone; ends
# when the group is gone. Nothing imported beyond the standard library's builtins, so it starts in milliseconds.
_WATCHER = """
import os, signal, sys, time
owner, group = int(sys.argv[1]), int(sys.argv[2])
while True:
    try:
        os.killpg(group, 0)
    except OSError:
        sys.exit(0)
    try:
        os.kill(owner, 0)
        alive = os.getppid() == owner
    except OSError:
        alive = False
    if not alive:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
        sys.exit(0)
    time.sleep(0.2)
"""


@dataclass
class ChildResult:
    rc: int | None  # None: it could not be started
    folder: Path | None  # <work>/run (ok) or <work>/run.failed-<time> (failed), when the run wrote one
    console: Path
    seconds: float
    error: str | None = None  # why it failed, from the run's own 'error:' line where it printed one
    stopped: bool = False  # ended by stop() or its timeout


def safe_relative(path: str, what: str) -> PurePosixPath:
    """A '/'-separated path that stays inside its folder (no absolute path, no '..'), or ValueError naming it."""
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts:
        raise ValueError(f"{what} {path!r} must be a relative path inside its folder (no '..', not absolute)")
    return p


def write_files(job: RunJob, work: Path) -> None:
    for rel, content in job.files:
        target = work / safe_relative(rel, f"job {job.key}: file")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


CONSOLE_TAIL = 1 << 20


def error_line(console: Path) -> str | None:
    """The run's own error message (the paragraph after its last 'error:' line), else the end of its console."""
    from mlharness import fileguard

    try:  # its last CONSOLE_TAIL bytes: a run that printed gigabytes ends with its error all the same
        with fileguard.open_regular(console, "the run's console", error=OSError) as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - CONSOLE_TAIL))
            lines = f.read(CONSOLE_TAIL).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("error:")), None)
    if start is not None:
        return " ".join(line.strip() for line in lines[start:])[len("error:"):].strip()
    tail = [line for line in lines[-6:] if line.strip()]
    return " / ".join(tail) if tail else None


class ChildRun:
    """One job's process; ``stop()`` may be called from any thread (the executor's cancel)."""

    def __init__(self, job: RunJob, work: Path, env: dict[str, str], python: str = sys.executable):
        self.job, self.work, self.python = job, work, python
        self.env = {**os.environ, **dict(job.env), **env}
        self.proc: subprocess.Popen | None = None
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def kill(self) -> None:
        """SIGKILL the run's process group now, from any thread (its node is going away: nothing to keep)."""
        if self.proc is not None:
            self._signal_group(signal.SIGKILL)

    def run(self) -> ChildResult:
        self.work.mkdir(parents=True, exist_ok=True)
        console = self.work / CONSOLE
        try:
            write_files(self.job, self.work)
        except (OSError, ValueError) as e:
            console.write_text(f"error: {e}\n")
            return ChildResult(None, None, console, 0.0, f"its files could not be written: {e}")
        with open(console, "w") as logf:
            turn = None if self.job.share_host else HostTurn(self._holder())
            if turn is not None and not self._take(turn, logf):
                logf.write("error: stopped while it waited for its turn on the host\n")
                return ChildResult(None, None, console, 0.0, "stopped before it started (it waited for its turn "
                                   "on the host)", stopped=True)
            try:
                return self._run(console, logf)
            finally:
                if turn is not None:
                    turn.release()

    def _holder(self) -> str:
        """How a run that waits for this one names it."""
        node = self.env.get("MLHARNESS_NODE_ID", "")
        return f"mlharness job {self.job.key}" + (f" of node {node[:12]}" if node else "")

    def _take(self, turn: HostTurn, logf: Any) -> bool:
        """Wait for the host (:mod:`mlharness.cluster.hostlock`): False when stopped meanwhile (stop(), or the
        KeyboardInterrupt ``ray.cancel`` raises in the task). The wait is said once, in the run's console and on
        this process's stderr (the driver's, or the Ray worker's that Ray forwards to it)."""

        def say(text: str) -> None:
            logf.write(text + "\n")
            logf.flush()
            print(text, file=sys.stderr, flush=True)

        try:
            return turn.take(say, self._stop.is_set)
        except KeyboardInterrupt:
            self._stop.set()
            return False

    def _run(self, console: Path, logf: Any) -> ChildResult:
        """The run's process, once the host is its (its timeout counts from here, not from the wait)."""
        started = time.monotonic()
        out = self.work / "run"
        argv = [self.python, "-m", "mlharness.cli", *self.job.argv, "--output", str(out)]
        logf.write(f"$ {subprocess.list2cmdline(argv)}\n\n")
        logf.flush()
        try:
            self.proc = subprocess.Popen(argv, cwd=self.work, env=self.env, stdout=logf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        except OSError as e:
            return ChildResult(None, None, console, 0.0, f"the run could not be started: {e}")
        watcher = subprocess.Popen([self.python, "-S", "-c", _WATCHER, str(os.getpid()), str(self.proc.pid)],
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc, stopped = self._wait(started)
        finally:
            self._kill_group()  # whatever the run left behind in its group (its own children)
            try:
                watcher.wait(timeout=2)
            except subprocess.TimeoutExpired:
                watcher.kill()
                watcher.wait()
        seconds = time.monotonic() - started
        failed = sorted(self.work.glob("run.failed-*"))
        folder = out if rc == 0 and out.is_dir() else (failed[-1] if failed else None)
        error = None
        if rc != 0:
            why = ("stopped: it ran past its timeout of "
                   f"{self.job.timeout_s:g} s" if stopped == "timeout" else "stopped" if stopped else None)
            error = why or error_line(console) or f"the run exited with status {rc}"
        return ChildResult(rc, folder, console, seconds, error, bool(stopped))

    def _wait(self, started: float) -> tuple[int, str | None]:
        assert self.proc is not None
        deadline = started + self.job.timeout_s if self.job.timeout_s else None
        while True:
            try:
                return self.proc.wait(timeout=0.2), None
            except subprocess.TimeoutExpired:
                pass
            except KeyboardInterrupt:  # ray.cancel without force, or Ctrl-C in a library caller
                self._stop.set()
            reason = "timeout" if deadline and time.monotonic() > deadline else "stop" if self._stop.is_set() else None
            if reason:
                return self._terminate(), reason

    def _terminate(self) -> int:
        """SIGINT to the group (the run keeps its partial output), SIGKILL after :data:`KILL_AFTER_S`."""
        assert self.proc is not None
        self._signal_group(signal.SIGINT)
        try:
            return self.proc.wait(timeout=KILL_AFTER_S)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            return self.proc.wait()

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # type: ignore[union-attr]
        except OSError:
            pass

    def _kill_group(self) -> None:
        if self.proc is not None:
            self._signal_group(signal.SIGKILL)
            if self.proc.poll() is None:
                self.proc.wait()
