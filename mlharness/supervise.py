"""The commands that commit results run in a child process, so that a run which did not finish never exits 0.

A hook is kept from ending the process on its own thread (:mod:`mlharness.manifest.hookguard`), but not from a
thread it starts, from C code (``ctypes``, ``libc._exit``) or from a crash (a segmentation fault): in-process,
such an end is exit status 0 with no result, or a process gone without a word. So the ``mlharness`` command
(``python -m mlharness``, ``python -m mlharness.cli``, the console script) runs the work of :data:`COMMANDS` in a
child: the same command line again, marked by the environment variable :data:`ENV` (a child never supervises),
in its own process group. The child inherits stdin, stdout and stderr, and writes short notes into a file the
parent holds open (:func:`note`): where a run stages its output, where it committed it, and the status its
command returned. The parent:

- forwards SIGINT, SIGTERM and SIGHUP (and SIGWINCH, SIGTSTP, SIGCONT) to the child, each exactly once: the child
  is outside the terminal's process group, so a Ctrl-C reaches it only through the parent, never twice (a second
  SIGINT is a run's "force quit", :mod:`mlharness.loadgen.interrupt`); the child dies with the parent
  (``PR_SET_PDEATHSIG``);
- returns the child's exit status, except: exit status 0 without the command having returned 0 (a hook or library
  ended the process), or a child killed by a signal (SIGSEGV, SIGABRT, SIGKILL, ...), become exit status 3 with
  one paragraph that says so and where the partial output was kept (``<name>.failed-<time>``, as a failed run's);
  a child killed by a forwarded SIGINT/SIGTERM/SIGHUP ends with the shell's 128 + signal.

The parent imports nothing beyond ``os``, ``sys`` and ``_signal`` (already loaded): it costs the start of a
second interpreter, not the command's imports twice. Callers of :func:`mlharness.cli.main` in-process are not
supervised. Supervised children read no terminal input: they run outside the terminal's foreground group.
"""

from __future__ import annotations

import _signal
import os
import sys
from collections.abc import Callable

ENV = "MLHARNESS_SUPERVISED"  # "<notes fd>,<parent pid>" in a supervised child

# the commands that run manifest code and commit results: the first word, and the second where a group holds them
COMMANDS: dict[str, frozenset[str] | None] = {
    "run": None, "sweep": None, "tune": None, "replay": None, "parity": None,
    "submission": frozenset({"run"}), "campaign": frozenset({"run"}),
    "bench": frozenset({"overhead", "generate", "client"}),
}
FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGWINCH, _signal.SIGCONT)
STOPPED_BY = _signal.SIGTSTP  # Ctrl-Z: the child stops, then the parent stops itself so the shell sees the job stop
INTERRUPTS = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)
PR_SET_PDEATHSIG = 1

_notes: list[int] = []  # in a supervised child: the notes fd, its pid (a forked grandchild writes none), the parent's


# ------------------------------------------------------------------------------------------------ the child side
def child() -> bool:
    """In a process the supervisor started: take the marker out of the environment (the command's own
    subprocesses supervise themselves again), keep the notes fd, and die with the parent. True when supervised."""
    value = os.environ.pop(ENV, None)
    if value is None:
        return bool(_notes)
    try:
        fd, parent = (int(v) for v in value.split(","))
        os.set_inheritable(fd, False)
    except (ValueError, OSError):
        return True  # a marker the supervisor did not set: never supervise, write no notes
    _die_with(parent)
    _notes[:] = [fd, os.getpid(), parent]
    return True


def _die_with(parent: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the supervisor died before the prctl: nobody is there to judge the run
        os._exit(1)


def note(kind: str, *fields: object) -> None:
    """Tell the supervisor something it needs to judge the end (``staged``/``committed``/``abandoned`` with the
    paths, ``exit`` with the status); nothing outside a supervised child."""
    if not _notes or os.getpid() != _notes[1]:
        return
    record = b"\0".join([kind.encode(), *(os.fsencode(str(f)) for f in fields)]) + b"\0\n"
    try:
        os.write(_notes[0], record)
    except OSError:
        pass


def command_pid() -> int:
    """The pid of the ``mlharness`` command a user started (and would signal): the supervisor's in a supervised
    child, else this process's."""
    return _notes[2] if len(_notes) > 2 and os.getpid() == _notes[1] else os.getpid()


def finish(main: Callable[[], int]) -> int:
    """``main()``; in a supervised child, the status it returned (or exited with) is noted for the parent."""
    if not _notes:
        return main()
    try:
        status = main()
    except SystemExit as e:  # argparse (--help, a usage error), startup.leave: the command's own exit
        note("exit", 0 if e.code is None else e.code if isinstance(e.code, int) else 1)
        raise
    note("exit", status if isinstance(status, int) else 0 if status is None else 1)
    return status


# ----------------------------------------------------------------------------------------------- the parent side
def wanted(argv: list[str]) -> bool:
    """Whether this command line is one of :data:`COMMANDS`, to be run in a supervised child. Read from the words
    alone (no parser is imported): ``--help`` and ``--version`` are not; the command line must be replayable
    (``sys.orig_argv`` ends with it)."""
    if os.environ.get(ENV) is not None or _notes or not argv:
        return False
    if any(a == "--version" or (a.startswith("--h") and "--help".startswith(a)) or a == "-h" for a in argv):
        return False
    words = [a for a in argv if not a.startswith("-")][:2]
    if not words or words[0] not in COMMANDS:
        return False
    actions = COMMANDS[words[0]]
    if actions is not None and (len(words) < 2 or words[1] not in actions):
        return False
    orig = getattr(sys, "orig_argv", None)
    return bool(orig) and len(orig) > len(argv) and orig[len(orig) - len(argv):] == argv


def _notes_file() -> int | None:
    """An unnamed file the child writes its notes into (gone once both processes close it)."""
    tmp = os.environ.get("TMPDIR") or "/tmp"
    try:
        return os.open(tmp, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (OSError, AttributeError):
        pass
    path = os.path.join(tmp, f".mlharness-notes-{os.getpid()}-{os.urandom(6).hex()}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    os.unlink(path)
    return fd


def supervise(argv: list[str]) -> int | None:
    """Run this command line again in a supervised child and return the exit status the command must end with;
    None when no child could be started (the caller runs the command in-process)."""
    fd = _notes_file()
    if fd is None:
        return None
    os.set_inheritable(fd, True)
    env = dict(os.environ)
    env[ENV] = f"{fd},{os.getpid()}"
    pid: list[int] = []
    pending: list[int] = []

    def forward(signum: int, frame: object) -> None:  # noqa: ARG001 - signal handler signature
        if not pid:
            pending.append(signum)
            return
        _send(pid[0], signum)
        if signum == STOPPED_BY:
            _send(os.getpid(), _signal.SIGSTOP)  # SIGCONT (fg, bg) wakes this process and is forwarded

    for sig in (*FORWARDED, STOPPED_BY):
        _signal.signal(sig, forward)
    try:
        pid.append(os.posix_spawn(sys.executable, [sys.executable, *sys.orig_argv[1:]], env, setpgroup=0))
    except OSError:
        os.close(fd)
        return None
    for sig in pending:
        forward(sig, None)
    while True:
        try:
            _, status = os.waitpid(pid[0], 0)
            break
        except ChildProcessError:  # reaped elsewhere: nothing left to judge by
            status = 0
            break
    for sig in (*FORWARDED, STOPPED_BY):
        _signal.signal(sig, _signal.SIG_IGN if sig in INTERRUPTS else _signal.SIG_DFL)  # the verdict is written
    return verdict(argv, os.waitstatus_to_exitcode(status), _read_notes(fd))


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def _read_notes(fd: int) -> list[list[str]]:
    chunks, offset = [], 0
    while True:
        data = os.pread(fd, 1 << 16, offset)
        if not data:
            break
        chunks.append(data)
        offset += len(data)
    os.close(fd)
    return [[os.fsdecode(f) for f in rec.split(b"\0")] for rec in b"".join(chunks).split(b"\0\n") if rec]


def verdict(argv: list[str], code: int, notes: list[list[str]]) -> int:
    """The exit status for a child that ended with ``code`` (negative: killed by that signal) after ``notes``;
    prints one paragraph where the child could not."""
    returned = next((int(n[1]) for n in reversed(notes) if n[0] == "exit" and n[1].lstrip("-").isdigit()), None)
    if code == 0 and returned == 0:
        return 0
    staged: dict[str, str] = {}
    committed: list[str] = []
    for n in notes:
        if n[0] == "staged" and len(n) == 3:
            staged[n[1]] = n[2]
        elif n[0] in ("committed", "abandoned") and len(n) >= 2:
            staged.pop(n[1], None)
            if n[0] == "committed" and len(n) == 3:
                committed.append(n[2])
    if code > 0 or (code == 0 and returned is not None):
        kept = _keep(staged)  # a process ended past mlharness's own clean-up (a thread's os._exit(5))
        if kept:
            _say(f"error: the command ended with exit status {code}; its partial output is kept in "
                 f"{', '.join(kept)}")
        return code if code else returned  # type: ignore[return-value]
    kept = _keep(staged)
    words = [a for a in argv if not a.startswith("-")][:2]
    command = " ".join(words if len(words) > 1 and COMMANDS.get(words[0]) else words[:1])
    done = (f"; it had committed {', '.join(committed)}, but did not finish" if committed else
            " but committed no result" if code == 0 else "")
    partial = (f"The partial output is kept in {', '.join(kept)}." if kept else "It left no partial output.")
    if code == 0:
        _say(f"error: mlharness {command} ended with exit status 0{done}: a hook or a library it calls ended the "
             f"process (os._exit from a thread, the C library's exit or _exit through ctypes, ...), so the run "
             f"failed (exit status 3). {partial} Manifest code must return or raise an exception, never end the "
             f"process.")
        return 3
    signum = -code
    name = _signal_name(signum)
    if signum in INTERRUPTS:
        _say(f"error: the run was interrupted by {name}" + (f"; its partial output is in {', '.join(kept)}" if kept
                                                             else ""))
        return 128 + signum
    cause = {
        _signal.SIGSEGV: "a segmentation fault: native code, such as a hook's ctypes call, a C extension or a "
                         "framework, read or wrote memory it may not",
        _signal.SIGBUS: "a bus error: native code read memory that is not there (a truncated memory-mapped file)",
        _signal.SIGABRT: "native code aborted (a failed assertion or an uncaught C++ exception in a library)",
        _signal.SIGKILL: "sent by another process, or by the kernel's out-of-memory killer (see dmesg)",
        _signal.SIGFPE: "an arithmetic fault in native code", _signal.SIGILL: "an illegal instruction in native "
        "code (a library built for another CPU)",
    }.get(signum, "sent by another process or raised by native code")
    _say(f"error: mlharness {command} was killed by {name} ({cause}){done}; the run failed (exit status 3). "
         f"{partial}")
    return 3


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _keep(staged: dict[str, str]) -> list[str]:
    """Move the staging folders a dead child left to ``<name>.failed-<time>`` (as :class:`mlharness.run.rundir.
    StagedDir` does), and remove their lock files unless another process holds them."""
    kept = []
    for partial, final in staged.items():
        if not os.path.isdir(partial) or os.path.islink(partial):
            continue
        import time

        parent, name = os.path.split(final)
        base = os.path.join(parent, f"{name}.failed-{time.strftime('%Y%m%d-%H%M%S')}")
        n = 0
        target = base
        while os.path.lexists(target):
            n += 1
            target = f"{base}-{n}"
        try:
            os.rename(partial, target)
        except OSError:
            target = partial
        kept.append(target)
        _remove_lock(os.path.join(parent, f".{name}.lock"))
    return kept


def _remove_lock(path: str) -> None:
    import fcntl

    if not os.path.lexists(path):
        return
    try:  # O_CREAT: the lock file is mlharness's own, opened as destination.exclusive opens it
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: another run uses it now
        if os.fstat(fd).st_ino == os.lstat(path).st_ino:
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)


def _say(text: str) -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        os.write(2, (text + "\n").encode(errors="replace"))
    except OSError:
        pass
