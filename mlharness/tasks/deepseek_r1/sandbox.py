"""Running generated code without letting it touch the host.

:func:`run_program_tests` runs one program against its tests in a fresh child process (:mod:`.sandbox_boot`, then
:mod:`.code_tests`) with:

- a fresh temporary working folder as its current directory (owned by the run's uid), removed afterwards, and a
  clean environment (``PATH``, ``HOME`` = that folder, ``LANG``);
- new PID, network and mount namespaces when the kernel allows them (as root, or through a user namespace): no
  network interface but loopback, private tmpfs over ``/tmp``, ``/var/tmp`` and ``/dev/shm``, and every process
  the code starts dies with the namespace. Without them, the process group and the run's uid are what gets
  killed. :attr:`SandboxReport.isolation` says which held. In both cases the socket constructors are replaced
  before the code runs, so a program that opens a socket fails (without a network namespace that guard is the
  only barrier: code that reaches the system call another way is not stopped);
- ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_AS`` (address space), ``RLIMIT_FSIZE`` (bytes per written file),
  ``RLIMIT_NPROC`` (processes of the user) and no core dumps. As root the code runs under a uid of its own
  (:data:`UID_BASE` + random, owned by no user): the process limit counts that run's processes only, other users'
  files stay read-only to it, and whatever still runs under that uid at the end is killed, even a process that
  left the process group;
- a wall-clock deadline, LiveCodeBench's global one by default (``(timeout + 1) * tests + 5`` seconds), after
  which the whole process group is killed; a killed or crashed run counts as failing every test (-1).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
BOOT = HERE / "sandbox_boot.py"
TEST_SCRIPT = HERE / "code_tests.py"
RESULT_PREFIX = "MLHARNESS-SANDBOX-RESULT "
UID_BASE = 200_000  # as root, each run gets its own uid in [UID_BASE, UID_BASE + UID_SPAN): no user has it
UID_SPAN = 100_000
OUTPUT_LIMIT = 1 << 20  # bytes of the child's stdout/stderr kept


@dataclass(frozen=True)
class Limits:
    """Per-program limits. ``timeout`` is LiveCodeBench's per-test limit (the official script uses 60 s)."""

    timeout: int = 60
    memory_bytes: int = 4 << 30
    file_bytes: int = 16 << 20
    processes: int = 64
    cpu_seconds: int | None = None  # default: timeout * tests + 1
    wall_seconds: float | None = None  # default: (timeout + 1) * tests + 5
    namespaces: bool = True  # False: only the socket guard and the process group (for comparison in tests)


@dataclass
class SandboxReport:
    results: list[Any]
    passed: bool
    isolation: str = "unknown"
    killed: bool = False
    exit_code: int | None = None
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _clean_env(workdir: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_program_tests(code: str, inputs: list[str], outputs: list[str], fn_name: str | None = None,
                      limits: Limits | None = None) -> SandboxReport:
    """Run ``code`` on LiveCodeBench tests in the sandbox; ``passed`` when every test passed."""
    limits = limits or Limits()
    n = max(1, len(inputs))
    wall = limits.wall_seconds if limits.wall_seconds is not None else (limits.timeout + 1) * n + 5
    cpu = limits.cpu_seconds if limits.cpu_seconds is not None else limits.timeout * n + 1
    workdir = Path(tempfile.mkdtemp(prefix="mlharness-sandbox-"))
    control = Path(tempfile.mkdtemp(prefix="mlharness-sandbox-control-"))  # not reachable by the code (0700)
    try:
        payload = {"code": code, "inputs": list(inputs), "outputs": list(outputs), "fn_name": fn_name,
                   "timeout": int(limits.timeout)}
        (control / "payload.json").write_text(json.dumps(payload), encoding="utf-8")
        cfg = {"script": str(TEST_SCRIPT), "payload": str(control / "payload.json"), "cpu_seconds": cpu,
               "memory_bytes": limits.memory_bytes, "file_bytes": limits.file_bytes,
               "processes": limits.processes, "namespaces": limits.namespaces,
               "python_home": sys.base_prefix}
        (control / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        uid = UID_BASE + secrets.randbelow(UID_SPAN) if os.geteuid() == 0 else None
        cfg["uid"] = uid
        (control / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        if uid is not None:
            os.chown(workdir, uid, uid)
        return _run(workdir, control / "config.json", wall, len(inputs), uid)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(control, ignore_errors=True)


def run_programs(jobs: list[tuple[str, dict[str, Any]]], limits: Limits | None = None,
                 workers: int = 2) -> list[bool]:
    """Whether each (program, tests) passes every one of its tests (``inputs``, ``outputs``, ``fn_name``), run by
    :func:`run_program_tests`, ``workers`` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def run(job: tuple[str, dict[str, Any]]) -> bool:
        code, tests = job
        return run_program_tests(code, tests["inputs"], tests["outputs"], tests.get("fn_name"), limits).passed

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(run, jobs))


def _processes_of(uid: int) -> list[int]:
    """The processes whose real uid is ``uid`` (a run's own uid: nothing else has it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(entry))
                        break
            except (OSError, ValueError, IndexError):
                continue
    return found


def _sweep(uid: int | None) -> None:
    """Kill every process left with the run's uid (one that left the process group with setsid)."""
    if uid is None:
        return
    for _ in range(50):
        pids = _processes_of(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _run(workdir: Path, config: Path, wall: float, n_tests: int, uid: int | None) -> SandboxReport:
    failed = [-1] * max(1, n_tests)
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(BOOT), str(config)], cwd=workdir,
                                env=_clean_env(workdir), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except OSError as e:
        return SandboxReport(failed, False, stderr=f"cannot start the sandbox: {e}")
    killed = False
    try:
        out, err = proc.communicate(timeout=wall)
    except subprocess.TimeoutExpired:
        killed = True
        _kill_group(proc)
        _sweep(uid)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a process holding the pipes escaped both: give up on its output
            out, err = b"", b""
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            proc.wait()
    finally:
        _kill_group(proc)  # nothing of the group outlives the run
        _sweep(uid)
    text = out[-OUTPUT_LIMIT:].decode("utf-8", "replace")
    stderr = err[-OUTPUT_LIMIT:].decode("utf-8", "replace")
    report = None
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                report = json.loads(line[len(RESULT_PREFIX):])
            except ValueError:
                report = None
            break
    if killed or not isinstance(report, dict) or not isinstance(report.get("results"), list):
        return SandboxReport(failed, False, killed=killed, exit_code=proc.returncode, stderr=stderr[-4000:])
    results = report["results"]
    passed = bool(results) and all(r is True for r in results)
    return SandboxReport(results, passed, isolation=str(report.get("isolation")), exit_code=proc.returncode,
                         stderr=stderr[-4000:])
