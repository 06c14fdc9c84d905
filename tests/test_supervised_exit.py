"""A run that did not commit a result never exits 0: the ``mlharness`` command runs a run in a supervised child
(:mod:`mlharness.supervise`), so a hook that ends the process where the hook guard cannot see it (``os._exit`` on
a thread it started, the C library's ``_exit``) or crashes it (a segmentation fault) ends with exit status 3 and
one paragraph, and the earlier result in the same folder stays as it was. A Ctrl-C reaches the run once.

Every case runs the real CLI in a subprocess with a timeout, on the toy ``echo`` predictor (no framework)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mlharness import supervise
from mlharness.run.destination import MARKER
from tests.helpers.toy_manifest import toy_manifest

TIMEOUT_S = 60
RUN = ["run", "--scenario", "Offline", "--mode", "accuracy", "--count", "4", "--no-progress"]

THREAD_EXIT = """\
import os, threading, time
def postprocess(ctx, outputs):
    threading.Thread(target=lambda: os._exit(0)).start()
    time.sleep(30)
    return outputs[0]
"""
LIBC_EXIT = """\
import ctypes
def postprocess(ctx, outputs):
    ctypes.CDLL(None)._exit(0)
    return outputs[0]
"""
SEGFAULT = """\
import ctypes
def postprocess(ctx, outputs):
    ctypes.string_at(0)
    return outputs[0]
"""


def write_manifest(folder: Path, name: str, postprocess: str | None = None, **framework: object) -> Path:
    m = toy_manifest(warmup=0, **framework)
    if postprocess is not None:
        m["postprocess"] = postprocess
    (folder / "model.bin").write_bytes(b"placeholder: the echo predictor never reads it")
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    return path


def env(folder: Path) -> dict[str, str]:
    e = dict(os.environ, MLHARNESS_CACHE=str(folder / "cache"))
    e.pop("MLHARNESS_MANIFEST_PATH", None)
    e.pop(supervise.ENV, None)
    return e


def cli(folder: Path, *args: str, entry: str = "mlharness.cli") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", entry, *args], cwd=folder, env=env(folder), capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("case", "source", "expect"), [
    ("thread_os_exit", THREAD_EXIT, "ended with exit status 0 but committed no result"),
    ("libc_exit", LIBC_EXIT, "ended with exit status 0 but committed no result"),
    ("segfault", SEGFAULT, "was killed by SIGSEGV"),
], ids=["thread_os_exit", "libc_exit", "segfault"])
def test_a_hook_that_ends_the_process_fails_the_run_and_keeps_the_earlier_result(tmp_path, case, source,
                                                                                   expect):
    good = write_manifest(tmp_path, "good")
    out = tmp_path / "out"
    first = cli(tmp_path, *RUN, "--manifest", str(good), "--output", str(out))
    assert first.returncode == 0, first.stderr
    assert (out / MARKER).is_file()
    before = snapshot(out)
    # the same benchmark name and identity: the hostile run would replace the earlier result if it committed
    hostile = write_manifest(tmp_path, "good", source)
    entry = "mlharness" if case == "libc_exit" else "mlharness.cli"
    result = cli(tmp_path, *RUN, "--manifest", str(hostile), "--output", str(out), entry=entry)
    text = result.stdout + result.stderr
    assert result.returncode == 3, f"rc={result.returncode}\n{text}"
    assert expect in result.stderr and "exit status 3" in result.stderr, text
    assert "Traceback" not in text, text
    failed = sorted(tmp_path.glob("out.failed-*"))
    assert len(failed) == 1 and f"partial output is kept in {failed[0]}" in result.stderr, text
    assert snapshot(out) == before, "the earlier result was changed"
    assert not list(tmp_path.glob(".out.partial-*")) and not (tmp_path / ".out.lock").exists(), \
        sorted(p.name for p in tmp_path.iterdir())


def test_a_ctrl_c_to_the_terminal_group_reaches_the_run_once(tmp_path):
    """A terminal's Ctrl-C goes to its whole foreground process group: the run sees one SIGINT (it stops and keeps
    its output, exit 130), never two (a second one is "exit at once")."""
    marking = ("import os, time\ndef postprocess(ctx, outputs):\n"
               "    open(os.path.join(ctx['manifest_dir'], 'started'), 'a').close()\n"
               "    time.sleep(0.05)\n    return outputs[0]\n")
    manifest = write_manifest(tmp_path, "slow", marking)
    err = tmp_path / "stderr.txt"
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest),
                                 "--scenario", "SingleStream", "--mode", "performance", "--min-duration-ms",
                                 "600000", "--no-calibrate", "--no-progress", "--output", str(tmp_path / "out")],
                                cwd=tmp_path, env=env(tmp_path), stdout=subprocess.DEVNULL, stderr=f,
                                start_new_session=True)  # its own group, as a shell's foreground job
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not (tmp_path / "started").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "started").exists(), err.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = err.read_text()
    assert rc == 130, text
    assert "interrupted again" not in text and "Traceback" not in text, text
    assert sorted(tmp_path.glob("out.failed-*")), "the partial output was not kept"


def test_commands_that_commit_nothing_are_not_supervised(monkeypatch):
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "mlharness", "run", "--scenario", "Offline"])
    monkeypatch.delenv(supervise.ENV, raising=False)
    assert supervise.wanted(["run", "--scenario", "Offline"])
    for argv in (["run", "--help"], ["run", "--he"], ["--version"], ["manifest", "list"], ["results", "list"],
                 ["submission", "check"], ["sysinfo"], []):
        monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "mlharness", *argv])
        assert not supervise.wanted(argv), argv
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-c", "code"])  # argv rewritten: not replayable
    assert not supervise.wanted(["run", "--scenario", "Offline"])
    monkeypatch.setenv(supervise.ENV, "3,1")  # a supervised child never supervises again
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "mlharness", "run"])
    assert not supervise.wanted(["run"])


def test_the_verdict(capfd):
    assert supervise.verdict(["run"], 0, [["exit", "0"]]) == 0
    assert supervise.verdict(["run"], 2, [["exit", "2"]]) == 2  # mlharness's own failure statuses pass through
    assert supervise.verdict(["run"], 130, []) == 130  # a second Ctrl-C's exit at once
    assert capfd.readouterr().err == ""
    assert supervise.verdict(["run"], 0, []) == 3
    assert "ended with exit status 0 but committed no result" in capfd.readouterr().err
    assert supervise.verdict(["sweep"], 0, [["committed", "/r/.p", "/r/p"]]) == 3
    assert "it had committed /r/p, but did not finish" in capfd.readouterr().err
    assert supervise.verdict(["run"], -signal.SIGKILL, []) == 3
    assert "killed by SIGKILL" in capfd.readouterr().err
    assert supervise.verdict(["run"], -signal.SIGTERM, []) == 143
    assert "interrupted by SIGTERM" in capfd.readouterr().err
