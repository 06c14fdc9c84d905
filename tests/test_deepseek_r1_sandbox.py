"""The LiveCodeBench sandbox of deepseek-r1 and gpt-oss-120b: verdicts are decided in the grader, generated code
runs in bubblewrap, and nothing it does gets out.

The adversarial programs (:mod:`tests.helpers.sandbox_battery`: forged verdicts, patched writes and comparisons,
frame walking, files in every world-writable host folder, unix, TCP and UDP sockets through ``_socket``, ctypes
and ``/dev/tcp``, disk and output floods, daemons, ``kill(-1)``, reading the grader's environment) are graded as
root and as an ordinary user; every one fails, the canaries and listeners show nothing got out, and no process of
the sandbox is left afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlharness.errors import AccuracyError
from mlharness.tasks.deepseek_r1 import isolation as iso
from mlharness.tasks.deepseek_r1.sandbox import Limits, run_program_tests
from tests.helpers import sandbox_battery as battery

ROOT = Path(__file__).resolve().parents[1]
FAST = Limits(timeout=2, memory_bytes=1 << 30, wall_seconds=12)
BATTERY_LIMITS = {"timeout": 2, "memory_bytes": 1 << 30, "processes": 32, "wall_seconds": 8}
ORDINARY_UID = 64_999


def bubblewrap_works() -> bool:
    return isinstance(iso.probe(iso.find_bwrap()), iso.Isolation)


needs_bwrap = pytest.mark.skipif(not bubblewrap_works(), reason=f"no working bubblewrap here: "
                                                                 f"{iso.probe(iso.find_bwrap())}")


def sandbox_processes() -> list[str]:
    """Processes running the sandbox's runner, or with a sandbox uid."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            uid = int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                           if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        if battery.RUNNER_MARK in cmd or iso.UID_BASE <= uid < iso.UID_BASE + iso.UID_SPAN or uid == ORDINARY_UID:
            found.append(f"{pid} (uid {uid}): {cmd[:120]}")
    return found


def settled(before: float = 10.0) -> list[str]:
    deadline = time.monotonic() + before
    while (left := sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@needs_bwrap
def test_verdicts_are_livecodebench_s_for_honest_programs():
    add, tests = battery.ADD, battery.TESTS
    ok = run_program_tests(add, *tests, limits=FAST)
    assert ok.passed and ok.results == [True, True] and ok.isolation == "bubblewrap"
    wrong = run_program_tests(add.replace("a + b", "a - b"), *tests, limits=FAST)
    assert not wrong.passed and wrong.results == [-2]
    assert run_program_tests("raise ValueError", *tests, limits=FAST).results == [-4]
    assert run_program_tests("def f(:\n", *tests, limits=FAST).results == [-4]
    assert run_program_tests("while True:\n    pass", *tests, limits=FAST).results == [-3]
    numbers = run_program_tests("print('3.0')", ["1 2"], ["3"], limits=FAST)
    assert numbers.passed  # equal as Decimal numbers, as LiveCodeBench compares lines

    def functional(body: str, given: str, expected: str) -> bool:
        return run_program_tests(f"class Solution:\n    def f(self, xs):\n        {body}", [given], [expected],
                                 fn_name="f", limits=FAST).passed

    assert functional("return tuple(sorted(xs))", "[3, 1, 2]", "[1, 2, 3]")  # a tuple result counts as a list
    assert not functional("return [tuple(xs)]", "[1, 2]", "[[1, 2]]")  # a nested tuple does not, as in Python
    assert functional("return 2.0", "[1]", "2") and functional("return True", "[1]", "1")
    assert functional("return {1: 'a'}", "[1]", "{\"1\": \"a\"}") is False  # int keys are not JSON's str keys
    assert functional("return 10 ** 400", "[1]", str(10 ** 400))
    # an object of its own whose __eq__ says yes never passes: it reaches the grader as a type name
    assert not functional("class Y:\n            def __eq__(self, o): return True\n        return Y()",
                          "[1]", "[1, 2, 3]")
    assert not functional("class L(list):\n            def __eq__(self, o): return True\n        return L([9])",
                          "[1]", "[1, 2, 3]")


@needs_bwrap
def test_a_run_past_its_deadline_fails_every_test():
    report = run_program_tests("import time\ntime.sleep(30)", *battery.TESTS,
                               limits=Limits(timeout=60, wall_seconds=1.5))
    assert report.killed and report.results == [-1, -1] and not report.passed


@contextlib.contextmanager
def listeners(tmp_path: Path, token: str):
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix_path = tmp_path / "listener.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix.listen(8)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + token)
    abstract.listen(8)
    for s in (tcp, udp, unix, abstract):
        s.setblocking(False)
    try:
        yield {"tcp_port": tcp.getsockname()[1], "udp_port": udp.getsockname()[1], "unix_path": str(unix_path)}
    finally:
        reached = []
        for name, s in (("tcp", tcp), ("unix", unix), ("abstract unix", abstract)):
            with contextlib.suppress(BlockingIOError):
                s.accept()
                reached.append(name)
        with contextlib.suppress(BlockingIOError):
            udp.recv(100)
            reached.append("udp")
        for s in (tcp, udp, unix, abstract):
            s.close()
        assert reached == [], f"listeners reached from the sandbox: {reached}"


def canaries(tmp_path: Path, token: str) -> dict[str, str]:
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    results = tmp_path / "results"
    (results / "run").mkdir(parents=True)
    (results / "run" / "accuracy.txt").write_text("kept")
    return {"canary": str(canary), "results_dir": str(results)}


def assert_nothing_got_out(tmp_path: Path, token: str, verdicts: dict[str, dict]) -> None:
    passed = sorted(name for name, v in verdicts.items() if v["passed"])
    assert passed == ["correct program"], f"adversarial programs that passed: {passed}"
    assert all(v["isolation"] == "bubblewrap" for v in verdicts.values())
    time.sleep(4.5)  # the daemon's canary would be written 4 s after it started
    left = [os.path.join(d, name) for d in battery.WORLD_WRITABLE if os.path.isdir(d)
            for name in os.listdir(d) if token in name]
    assert left == [], f"files the sandbox left in host folders: {left}"
    assert (tmp_path / "canary.txt").read_text() == "original"
    assert (tmp_path / "results" / "run" / "accuracy.txt").read_text() == "kept"
    assert settled() == []


@needs_bwrap
def test_adversarial_programs_fail_and_nothing_gets_out_as_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    token, secret = f"mlh{secrets.token_hex(6)}", secrets.token_hex(12)
    os.environ["MLH_BATTERY_SECRET"] = secret
    try:
        with listeners(tmp_path, token) as ports:
            code = battery.programs(token, secret, **ports, **canaries(tmp_path, token))
            verdicts = battery.grade(BATTERY_LIMITS, code)
            verdicts["correct program"] = battery.grade(BATTERY_LIMITS, {"c": battery.ADD})["c"]
    finally:
        del os.environ["MLH_BATTERY_SECRET"]
    assert len(code) >= 40
    assert_nothing_got_out(tmp_path, token, verdicts)
    slow = {n: v["seconds"] for n, v in verdicts.items() if v["seconds"] > BATTERY_LIMITS["wall_seconds"] + 5}
    assert slow == {}, f"programs that outlived the deadline: {slow}"


REPO_VIEW = "/mnt/mlharness-repo"  # where the ordinary user sees the checkout, in its own mount namespace


def as_ordinary_user(tmp_path: Path, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``argv`` run under uid :data:`ORDINARY_UID` in a private mount namespace where the checkout is bound at
    :data:`REPO_VIEW` (it may lie in a folder that user cannot enter, such as a 0700 temporary folder) and the
    folders under /root (the interpreter may live there, behind a 0700 /root) are bound into a 0755 tmpfs: the
    host's folders are not changed, only this process's view of them. A path of ``argv`` inside the checkout is
    given as its view."""
    view = tmp_path / "root-view"
    view.mkdir()
    script = (f"set -e\nmount -t tmpfs -o mode=0755,size=1m tmpfs /mnt\nmkdir {REPO_VIEW}\n"
              f"mount --bind \"$2\" {REPO_VIEW}\n"
              "mount --bind /root \"$1\"\nmount -t tmpfs -o mode=0755,size=1m tmpfs /root\n"
              "for e in \"$1\"/* \"$1\"/.[!.]*; do\n  [ -e \"$e\" ] || continue\n  n=$(basename \"$e\")\n"
              "  if [ -d \"$e\" ]; then mkdir \"/root/$n\"; else touch \"/root/$n\"; fi\n"
              "  mount --bind \"$e\" \"/root/$n\"\ndone\nshift 2\n"
              f"exec setpriv --reuid {ORDINARY_UID} --regid {ORDINARY_UID} --clear-groups \"$@\"\n")
    argv = [REPO_VIEW + a[len(str(ROOT)):] if a.startswith(str(ROOT) + os.sep) else a for a in argv]
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(view), str(ROOT), *argv]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": REPO_VIEW, "HOME": "/", "LANG": "C.UTF-8"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd="/")


def ordinary_user_available() -> bool:
    return os.geteuid() == 0 and os.path.isdir("/mnt") and all(shutil.which(t) for t in ("unshare", "setpriv"))


@needs_bwrap
def test_adversarial_programs_fail_and_nothing_gets_out_as_an_ordinary_user(tmp_path):
    if not ordinary_user_available():
        pytest.skip("needs root to become an ordinary user (unshare, setpriv)")
    token, secret = f"mlh{secrets.token_hex(6)}", secrets.token_hex(12)
    with listeners(tmp_path, token) as ports:
        args = {"secret": secret, "limits": BATTERY_LIMITS,
                "programs": {"token": token, "secret": secret, **ports, **canaries(tmp_path, token)}}
        proc = as_ordinary_user(tmp_path, [sys.executable, "-c", "from tests.helpers.sandbox_battery import main; "
                                                                   "main()", json.dumps(args)], timeout=300)
    if proc.returncode != 0 and "user namespace" in proc.stderr:
        pytest.skip(f"no unprivileged user namespaces here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["uid"] == ORDINARY_UID
    assert_nothing_got_out(tmp_path, token, report["verdicts"])


def test_without_isolation_generated_code_is_refused_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv(iso.ENV_BWRAP, str(tmp_path / "no-bwrap-here"))
    monkeypatch.delenv(iso.ENV_ALLOW, raising=False)
    with pytest.raises(AccuracyError, match="--allow-unisolated-code") as refused:
        run_program_tests(battery.ADD, *battery.TESTS, limits=FAST)
    assert "no-bwrap-here" in str(refused.value)
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    allowed = Limits(timeout=2, memory_bytes=1 << 30, wall_seconds=12, allow_unisolated=True)
    report = run_program_tests(battery.ADD, *battery.TESTS, limits=allowed)
    assert report.passed and report.isolation == "none"
    # unisolated, the host is in reach: the leak-detecting programs of the battery do see it (so, isolated,
    # their failure above means something)
    sees = battery.programs("t", "s", 1, 2, "/nonexistent", str(canary), str(tmp_path))["sees the canary"]
    assert run_program_tests(sees, *battery.TESTS, limits=allowed).passed


def test_the_accuracy_commands_refuse_without_isolation_and_bad_timeouts(run_cli, cli_env):
    fixture = ROOT / "tests" / "fixtures" / "deepseek_r1"
    base = ["accuracy", "deepseek-r1", "--log", str(fixture / "mlperf_log_accuracy.json"), "--dataset-file",
            str(fixture / "dataset.pkl"), "--tokenizer", str(fixture / "tokenizer")]
    for bad in ("0", "-5", "1e9", "nan", "ten"):
        proc = run_cli(*base, "--code-timeout", bad, timeout=120)
        assert proc.returncode == 2 and "code_timeout" in proc.stderr and "Traceback" not in proc.stderr, \
            (bad, proc.stderr[-2000:])
    proc = run_cli(*base, "--code-timeout", "5", timeout=180, env={**cli_env, iso.ENV_BWRAP: "none"})
    assert proc.returncode == 2 and "--allow-unisolated-code" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
