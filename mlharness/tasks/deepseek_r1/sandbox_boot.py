"""Started by :mod:`mlharness.tasks.deepseek_r1.sandbox` as ``python -I -S sandbox_boot.py CONFIG`` (standard
library only, nothing of mlharness is imported): it isolates itself, then runs the payload script on the payload.

1. ``unshare`` new PID, network and mount namespaces (as root directly; otherwise inside a new user namespace).
   When the kernel refuses, the run goes on without them and says so (``isolation`` in the report).
2. ``fork``: the child is the namespace's init. It dies with its parent (``PR_SET_PDEATHSIG``), and when it dies
   the kernel kills every process of the namespace, whatever the code did (``setsid``, double forks).
3. init mounts private tmpfs over ``/tmp``, ``/var/tmp`` and ``/dev/shm`` (the working folder stays reachable as
   the current directory), then forks the worker and reaps until the worker exits.
4. The worker sets the resource limits (CPU seconds, address space, file size, process count, no core dumps),
   drops to the run's own unprivileged uid when it runs as root, and replaces the socket constructors so that a program opening a
   socket fails (with no network namespace, that guard is all that keeps the network out). Then it executes
   the payload script.

The payload script prints one JSON line prefixed with ``MLHARNESS-SANDBOX-RESULT `` on the boot's stdout.
"""

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
PYTHON_MOUNT = "/tmp/.mlharness-python"
PRELOAD = ("ast", "json", "signal", "decimal", "io", "types", "unittest.mock", "string", "re", "datetime",
           "collections", "heapq", "bisect", "copy", "math", "random", "statistics", "itertools", "functools",
           "operator", "typing", "fractions", "array", "time", "os", "sys", "string", "queue", "dataclasses",
           "enum", "numbers", "cmath", "textwrap")


def libc():
    return ctypes.CDLL(None, use_errno=True)


def try_unshare(lib, flags):
    return lib.unshare(ctypes.c_int(flags)) == 0


def isolate(lib):
    base = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS
    if os.geteuid() == 0 and try_unshare(lib, base):
        return "namespaces"
    if try_unshare(lib, base | CLONE_NEWUSER):
        return "user-namespaces"
    return "none"


def bind(lib, source, target, read_only=False):
    os.makedirs(target, exist_ok=True)
    if lib.mount(source.encode(), target.encode(), None, ctypes.c_ulong(MS_BIND), None) != 0:
        return False
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID
    return not read_only or lib.mount(b"none", target.encode(), None, ctypes.c_ulong(flags), None) == 0


def private_tmp(lib, python_home):
    """Private tmpfs over the shared writable folders; the working folder and the Python installation (which
    may lie in a folder the run's uid cannot enter) bound back in, the latter read-only at :data:`PYTHON_MOUNT`."""
    workdir = os.getcwd()
    if lib.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        return False
    ok = True
    for path in PRIVATE_DIRS:
        if os.path.isdir(path):
            ok = lib.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                           b"size=64m,mode=1777") == 0 and ok
    ok = bind(lib, ".", workdir) and ok  # "." is still the folder under the old /tmp
    os.chdir(workdir)
    return bind(lib, python_home, PYTHON_MOUNT, read_only=True) and ok


def guard_sockets():
    import socket

    def refused(*args, **kwargs):
        raise PermissionError("network access is disabled in the sandbox")

    class RefusedSocket(socket.socket):  # a class still: ssl and others subclass socket.socket
        def __init__(self, *args, **kwargs):
            refused()

    socket.socket = RefusedSocket
    socket.socketpair = refused
    socket.create_connection = refused
    socket.create_server = refused
    socket.fromfd = refused


def processes_of_user():
    """How many processes the real uid has now (they all count against RLIMIT_NPROC)."""
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status", encoding="utf-8") as f:
                    count += any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in f)
            except (OSError, ValueError, IndexError):
                pass
    return count


def limit(cfg, own_uid):
    cpu = int(cfg["cpu_seconds"])
    # under the run's own uid the count starts at zero; under the user's uid, their other processes count too
    nproc = int(cfg["processes"]) + (0 if own_uid else processes_of_user())
    for name, value in (("RLIMIT_CPU", (cpu, cpu + 1)), ("RLIMIT_AS", int(cfg["memory_bytes"])),
                        ("RLIMIT_FSIZE", int(cfg["file_bytes"])), ("RLIMIT_NPROC", nproc),
                        ("RLIMIT_CORE", 0)):
        pair = value if isinstance(value, tuple) else (value, value)
        resource.setrlimit(getattr(resource, name), pair)


def worker(cfg, script, payload, isolation):
    limit(cfg, own_uid=os.geteuid() == 0)
    home = cfg["python_home"]
    if isolation in ("namespaces", "user-namespaces"):  # the standard library through the read-only mount
        def moved(paths):
            return [PYTHON_MOUNT + p[len(home):] if p.startswith(home) else p for p in paths]

        sys.path[:] = moved(sys.path)
        for module in list(sys.modules.values()):  # packages already imported look up submodules there too
            if isinstance(getattr(module, "__path__", None), list):
                module.__path__[:] = moved(module.__path__)
        sys.path_importer_cache.clear()
    if isolation == "none":  # no namespaces: no private mount of the standard library either
        for name in PRELOAD:  # what the grader and most programs import, loaded while it is still readable
            try:
                __import__(name)
            except ImportError:
                pass
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(int(cfg["uid"]))
        os.setuid(int(cfg["uid"]))
    guard_sockets()  # in a network namespace too: a program that opens a socket fails, as it would offline
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": os.getcwd(), "LANG": "C.UTF-8"})
    payload["isolation"] = isolation
    namespace = {"__name__": "__sandbox__", "PAYLOAD": payload}
    exec(compile(script, cfg["script"], "exec"), namespace)


def init(lib, cfg, script, payload, isolation):
    lib.prctl(PR_SET_PDEATHSIG, 9)
    if os.getppid() == 1 and isolation == "none":
        os._exit(70)  # the parent is already gone
    if isolation != "none" and not private_tmp(lib, cfg["python_home"]):
        isolation += "-shared-tmp"
    pid = os.fork()
    if pid == 0:
        try:
            worker(cfg, script, payload, isolation)
            code = 0
        except BaseException as e:  # noqa: BLE001 - the worker's own failure, reported as its exit status
            sys.stderr.write(f"sandbox worker: {type(e).__name__}: {e}\n")
            code = 71
        sys.stdout.flush()
        os._exit(code)
    status = 0
    while True:  # reap everything; the worker's status is the result
        try:
            done, st = os.wait()
        except ChildProcessError:
            break
        if done == pid:
            status = st
            break
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cfg = json.load(f)
    with open(cfg["script"], encoding="utf-8") as f:
        script = f.read()
    with open(cfg["payload"], encoding="utf-8") as f:  # read before /tmp is replaced
        payload = json.load(f)
    lib = libc()
    isolation = isolate(lib) if cfg.get("namespaces", True) else "none"
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        init(lib, cfg, script, payload, isolation)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main()
