"""Signals while the ``mlharness`` command starts.

Importing the command's modules takes a second or more on a busy host, and nothing has been written yet: a Ctrl-C
(or SIGTERM) then ends the process at once with one line and the shell's status (130, 143), not a
``KeyboardInterrupt`` traceback from whichever import it hit. :func:`started` hands the signals back to the command,
whose own handling (``mlharness.cli.main``, ``mlharness.loadgen.interrupt``) takes over from there.

:func:`announce` prints the command's first line before those imports (torch, transformers: up to ten seconds on
a busy host), so a run says what it is loading within its first second, on a terminal or in a log.
"""

from __future__ import annotations

# _signal, not signal: the C module is already loaded, while ``import signal`` (enum, ...) takes milliseconds in
# which a Ctrl-C would still be a KeyboardInterrupt; nothing else is imported here for the same reason
import _signal
import atexit
import os
import sys

NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM"}
_previous: dict[int, object] = {}
_leaving: list[int] = []  # the exit status of a command a signal ended
_registered: list[bool] = []


def _exit(signum: int, frame: object) -> None:  # noqa: ARG001 - signal handler signature
    try:  # os.write: the signal may have interrupted a print
        os.write(2, f"error: interrupted by {NAMES[signum]} while mlharness was starting\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


def guard() -> None:
    """Until :func:`started`, SIGINT and SIGTERM end the process at once (call it first, on the main thread)."""
    if not _registered:  # the first exit handler registered runs last, after every other one
        _registered.append(True)
        atexit.register(_skip_finalization)
    if not _previous:
        for sig in NAMES:
            _previous[sig] = _signal.signal(sig, _exit)


def started() -> None:
    """The command is ready to handle signals itself: put back the handlers :func:`guard` replaced."""
    for sig, previous in _previous.items():
        _signal.signal(sig, previous if previous is not None else _signal.SIG_DFL)
    _previous.clear()


def leave(status: int) -> None:
    """End the command with ``status``. After a signal (130, 143) the interpreter's finalization is skipped once
    the exit handlers have run: the output is written and kept by then, and tearing down a loaded framework
    (torch, transformers) takes seconds on a busy host, which would break the promise that a signal ends a run
    within about 3 s."""
    if status in (128 + _signal.SIGINT, 128 + _signal.SIGTERM):
        _leaving.append(status)
    sys.exit(status)


# commands that load a model, each with the manifest it loads without --manifest (None: the command decides)
LOADING = {"run": "demo", "submission run": "demo", "sweep": None, "tune": None,
           "bench overhead": "resnet50-random", "bench generate": "llama3.1-8b-random"}
ENDPOINT_MANIFEST = "llama3.1-8b-random"  # --endpoint without --manifest (mlharness.run.run_args)
MANIFESTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifests")
_SCAN_BYTES = 65536  # a manifest's framework is near its top; a larger file is not read for the first line


def first_line(argv: list[str]) -> str | None:
    """``mlharness run: loading demo (onnxruntime) ...`` for a command that loads a model; None for the others
    (and for --help, --version). Only the command line and, when it is a regular file, the manifest's first
    lines are read: no YAML parser, nothing that imports."""
    if any(a in ("-h", "--help", "--version") for a in argv):
        return None
    words = [a for a in argv if not a.startswith("-")][:2]  # the global options (-v) take no value
    command = next((c for c in (" ".join(words), words[0] if words else "") if c in LOADING), None)
    if command is None:
        return None
    manifest, framework = _option(argv, "--manifest"), _option(argv, "--framework")
    endpoint = _option(argv, "--endpoint") is not None
    if manifest is None:
        manifest = ENDPOINT_MANIFEST if endpoint else LOADING[command]
    if manifest and "@" in manifest and framework is None:
        manifest, _, framework = manifest.rpartition("@")
    if framework is None and manifest:
        framework = "openai" if endpoint else _framework_of(manifest)
    what = (manifest or "its default manifest") + (f" ({framework})" if framework else "")
    return f"mlharness {command}: loading {what} ..."


def _option(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def _framework_of(manifest: str) -> str | None:
    """The ``framework`` a manifest names near its top, or None (a variant file, a FIFO, an odd layout): the
    first line is a courtesy, the manifest's checks come later with the real loader."""
    path = manifest if manifest.endswith((".yaml", ".yml")) or os.sep in manifest else _builtin(manifest)
    from mlharness.fileguard import UnusableFile, open_regular

    if path is None:
        return None
    try:
        with open_regular(path, "manifest") as f:  # a FIFO is refused, never waited on
            lines = f.read(_SCAN_BYTES).decode("utf-8", "replace").splitlines()
    except (OSError, UnusableFile):
        return None
    for i, line in enumerate(lines):
        if line.startswith("framework:"):
            value = line.partition(":")[2].split("#")[0].strip()
            if value.startswith("{") and "name:" in value:  # framework: {name: echo, ...}
                value = value.partition("name:")[2].split(",")[0].strip(" }")
            elif not value and i + 1 < len(lines) and lines[i + 1].strip().startswith("name:"):
                value = lines[i + 1].partition(":")[2].split("#")[0].strip()
            return value.strip("'\"") or None
    return None


def _builtin(name: str) -> str | None:
    """A built-in model manifest by name, as the loader finds it (``$MLHARNESS_MANIFEST_PATH`` first)."""
    roots = [d for d in os.environ.get("MLHARNESS_MANIFEST_PATH", "").split(os.pathsep) if d] + [MANIFESTS_DIR]
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "datasets")
            if name + ".yaml" in files:
                return os.path.join(folder, name + ".yaml")
    return None


def announce(argv: list[str]) -> None:
    """Write the command's first line to stderr at once (os.write: nothing buffered yet, nothing imported)."""
    line = first_line(argv)
    if line:
        try:
            os.write(2, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass


def _skip_finalization() -> None:
    if _leaving:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(_leaving[0])
