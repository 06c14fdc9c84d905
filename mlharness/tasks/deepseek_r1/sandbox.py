"""Grading generated code without trusting it.

:func:`run_program_tests` starts one program's sandbox (:mod:`.isolation`: bubblewrap, or with the user's explicit
leave a plain child process) running :mod:`.code_runner`, then feeds it the problem's test inputs one at a time
and decides each verdict here, in the grader (:mod:`.code_tests`): the sandbox only says what the program printed
or returned. The expected outputs never leave this process, so nothing the program does (forged lines, patched
writes, walking frames, replacing the comparison) can make a wrong program pass.

Everything read from the sandbox is capped (:data:`REPLY_LIMIT` per reply, :data:`STDERR_LIMIT` of its stderr
kept), a wall-clock deadline (LiveCodeBench's global one, ``(timeout + 1) * tests + 5`` seconds, by default) ends
the run with every test failed (-1), and at the end the sandbox is killed with all it started.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import selectors
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from mlharness.errors import AccuracyError
from mlharness.tasks.deepseek_r1 import code_tests
from mlharness.tasks.deepseek_r1.isolation import (
    RUNNER,
    Isolation,
    bwrap_command,
    choose,
    limiter,
    plain_command,
    processes_of,
)

log = logging.getLogger(__name__)

REPLY_LIMIT = 64 << 20  # bytes of one reply (a test's output): larger fails the test
STDERR_LIMIT = 64 << 10  # bytes of the sandbox's stderr kept
MIN_TIMEOUT, MAX_TIMEOUT = 1, 3600


@dataclass(frozen=True)
class Limits:
    """Per-program limits. ``timeout`` is LiveCodeBench's per-test limit (the official script uses 60 s)."""

    timeout: int = 60
    memory_bytes: int = 4 << 30
    file_bytes: int = 16 << 20
    processes: int = 64
    cpu_seconds: int | None = None  # default: timeout * tests + 1
    wall_seconds: float | None = None  # default: (timeout + 1) * tests + 5
    allow_unisolated: bool = False  # run without isolation where there is none (else refuse)

    def __post_init__(self) -> None:
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int) \
                or not MIN_TIMEOUT <= self.timeout <= MAX_TIMEOUT:
            raise AccuracyError(f"the LiveCodeBench timeout per test (--code-timeout, accuracy option code_timeout) "
                                f"must be a whole number of seconds from {MIN_TIMEOUT} to {MAX_TIMEOUT}, not "
                                f"{self.timeout!r}")


def timeout_option(value: Any) -> int:
    """A ``code_timeout`` as given (option or flag): a whole number of seconds in range, else an AccuracyError."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number != number or not number.is_integer():
        raise AccuracyError(f"code_timeout must be a whole number of seconds from {MIN_TIMEOUT} to {MAX_TIMEOUT}, "
                            f"not {value!r}")
    return Limits(timeout=int(number)).timeout


@dataclass
class SandboxReport:
    results: list[Any]
    passed: bool
    isolation: str = "unknown"
    killed: bool = False
    exit_code: int | None = None
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class SandboxGone(Exception):
    """The sandbox closed its end, sent something that is not a reply, or ran past the deadline."""


class Conversation:
    """Frames to and from one sandbox, every wait bounded by the run's deadline, every read capped."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        self.proc, self.deadline = proc, deadline
        self.selector = selectors.DefaultSelector()
        for stream in (proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
            self.selector.register(stream.fileno(), selectors.EVENT_READ)
        os.set_blocking(proc.stdin.fileno(), False)
        self.inbox = bytearray()
        self.stderr = bytearray()
        self.timed_out = False

    def _pump(self, want_write: bytes | None = None) -> int:
        """Wait for input (and room to write ``want_write``); returns how many bytes of it were written."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.timed_out = True
            raise SandboxGone("deadline")
        stdin_fd = self.proc.stdin.fileno()
        if want_write is not None:
            self.selector.register(stdin_fd, selectors.EVENT_WRITE)
        try:
            events = self.selector.select(timeout=min(remaining, 1.0))
        finally:
            if want_write is not None:
                self.selector.unregister(stdin_fd)
        written = 0
        for key, _ in events:
            if key.fd == stdin_fd:
                try:
                    written = os.write(stdin_fd, want_write)
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    raise SandboxGone("closed") from None
                continue
            try:
                chunk = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if key.fd == self.proc.stderr.fileno():
                if not chunk:
                    self.selector.unregister(key.fd)
                self.stderr += chunk
                del self.stderr[:-STDERR_LIMIT]
                continue
            if not chunk:
                raise SandboxGone("closed")
            self.inbox += chunk
            if len(self.inbox) > REPLY_LIMIT + 4:
                raise SandboxGone("reply too large")
        return written

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode("utf-8", "surrogatepass")
        data = struct.pack(">I", len(data)) + data
        while data:
            data = data[self._pump(data):]

    def receive(self) -> Any:
        while len(self.inbox) < 4:
            self._pump()
        (size,) = struct.unpack(">I", self.inbox[:4])
        if size > REPLY_LIMIT:
            raise SandboxGone("reply too large")
        while len(self.inbox) < 4 + size:
            self._pump()
        body = bytes(self.inbox[4:4 + size])
        del self.inbox[:4 + size]
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            return None

    def close(self) -> None:
        self.selector.close()


def _reply_to(reply: Any, nonce: str) -> bool:
    """Whether ``reply`` is the runner's answer to the request that carried ``nonce`` (a frame the program wrote
    into the channel itself does not know it)."""
    return isinstance(reply, dict) and reply.get("nonce") == nonce


@functools.cache
def _runner_source() -> str:
    """code_runner.py's text, read once: every program's sandbox starts it with ``python -c``."""
    return RUNNER.read_text(encoding="utf-8")


def _start(isolation: Isolation, limits: Limits, cpu: int) -> tuple[subprocess.Popen[bytes], int | None]:
    python_args = ["-c", _runner_source()]
    if isolation.bwrap:
        cmd, uid = bwrap_command(isolation.bwrap, python_args)
    else:
        cmd, uid = plain_command(python_args), None
    preexec = limiter(cpu, limits.memory_bytes, limits.file_bytes, limits.processes, own_uid=uid is not None)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd="/", start_new_session=True, close_fds=True, preexec_fn=preexec)
    return proc, uid


def _kill(proc: subprocess.Popen[bytes], uid: int | None) -> None:
    """The sandbox and everything it started: its process group, and as root every process of its own uid."""
    for _ in range(50):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        left = processes_of(uid) if uid is not None else []
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not left:
            break
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("sandbox process %d did not exit after SIGKILL", proc.pid)


def run_program_tests(code: str, inputs: list[str], outputs: list[str], fn_name: str | None = None,
                      limits: Limits | None = None, isolation: Isolation | None = None) -> SandboxReport:
    """Run ``code`` on LiveCodeBench tests in the sandbox; ``passed`` when every test passed."""
    limits = limits or Limits()
    isolation = isolation or choose(limits.allow_unisolated)
    n = max(1, len(inputs))
    wall = limits.wall_seconds if limits.wall_seconds is not None else (limits.timeout + 1) * n + 5
    cpu = limits.cpu_seconds if limits.cpu_seconds is not None else limits.timeout * n + 1
    try:
        proc, uid = _start(isolation, limits, cpu)
    except OSError as e:
        raise AccuracyError(f"cannot start the code sandbox ({isolation.describe()}): {e}") from e
    talk = Conversation(proc, time.monotonic() + wall)
    results: list[Any] = []
    try:
        nonce = secrets.token_hex(16)
        talk.send({"code": code, "fn_name": fn_name, "timeout": int(limits.timeout), "nonce": nonce})
        loaded = talk.receive()
        if not (_reply_to(loaded, nonce) and loaded.get("status") == "ok"):  # LiveCodeBench's runtime error
            results = [code_tests.ERROR]
        else:
            for given, expected in zip(inputs, outputs, strict=False):
                nonce = secrets.token_hex(16)
                talk.send({"input": given, "nonce": nonce})
                reply = talk.receive()
                outcome = code_tests.verdict(reply, expected, bool(fn_name)) if _reply_to(reply, nonce) \
                    else code_tests.ERROR
                results.append(outcome)
                if outcome is not True:
                    break
    except SandboxGone as gone:
        if talk.timed_out:
            results = [-1] * n
        elif not results or results[-1] is True:  # it died in a test: LiveCodeBench's runtime error
            results.append(code_tests.ERROR)
        log.debug("sandbox ended early: %s", gone)
    finally:
        _kill(proc, uid)
        talk.close()
    passed = bool(results) and len(results) == len(inputs) and all(r is True for r in results)
    return SandboxReport(results, passed, isolation=isolation.kind, killed=talk.timed_out,
                         exit_code=proc.returncode, stderr=talk.stderr.decode("utf-8", "replace")[-4000:])


def run_programs(jobs: list[tuple[str, dict[str, Any]]], limits: Limits | None = None,
                 workers: int = 2) -> tuple[list[bool], Isolation | None]:
    """(whether each (program, tests) passes every one of its tests, the isolation they ran under), run by
    :func:`run_program_tests`, ``workers`` at a time. Without jobs nothing is checked or started."""
    from concurrent.futures import ThreadPoolExecutor

    if not jobs:
        return [], None
    limits = limits or Limits()
    isolation = choose(limits.allow_unisolated)
    # said in the run's normal output (stderr: stdout carries the accuracy text), whatever the log level
    sys.stderr.write(f"LiveCodeBench programs run in {isolation.describe()}\n")
    sys.stderr.flush()

    def run(job: tuple[str, dict[str, Any]]) -> bool:
        code, tests = job
        return run_program_tests(code, tests["inputs"], tests["outputs"], tests.get("fn_name"), limits,
                                 isolation).passed

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(run, jobs)), isolation


def limits_from_options(options: dict[str, Any], default_timeout: int = 60) -> Limits:
    """The sandbox's limits a metric's accuracy options ask for (``code_timeout``, ``allow_unisolated_code``)."""
    allow = options.get("allow_unisolated_code", False)
    if not isinstance(allow, bool):
        raise AccuracyError(f"accuracy option allow_unisolated_code must be true or false, not {allow!r}")
    return Limits(timeout=timeout_option(options.get("code_timeout", default_timeout)), allow_unisolated=allow)


def describe(isolation: Isolation | None) -> str | None:
    """What the run's accuracy metadata records: the isolation generated code ran under (None: none ran)."""
    return isolation.describe() if isolation is not None else None
