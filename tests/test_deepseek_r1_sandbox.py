"""The LiveCodeBench sandbox of deepseek-r1: generated code that writes outside its folder, opens a socket,
fork-bombs, allocates 10 GB or loops forever is contained, scored as a failure, and the run goes on; the host is
untouched (a canary file outside the sandbox folder keeps its bytes, /tmp gets nothing, no process survives)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mlharness.tasks.deepseek_r1.sandbox import Limits, run_program_tests

ADD = "a, b = map(int, input().split())\nprint(a + b)"
TESTS = (["1 2\n", "40 2\n"], ["3\n", "42\n"])
FAST = Limits(timeout=2, memory_bytes=1 << 30, wall_seconds=12)


def processes() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def survivors(before: set[int]) -> list[str]:
    """Processes started since ``before`` that run sandbox code (sandbox_boot or code_tests)."""
    found = []
    for pid in processes() - before:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "sandbox_boot" in cmd:
            found.append(f"{pid}: {cmd}")
    return found


def test_a_correct_program_passes_and_a_wrong_one_fails():
    ok = run_program_tests(ADD, *TESTS, limits=FAST)
    assert ok.passed and ok.results == [True, True]
    wrong = run_program_tests(ADD.replace("a + b", "a - b"), *TESTS, limits=FAST)
    assert not wrong.passed and wrong.results == [-2]
    functional = run_program_tests("class Solution:\n    def f(self, xs):\n        return tuple(sorted(xs))",
                                   ["[3, 1, 2]"], ["[1, 2, 3]"], fn_name="f", limits=FAST)
    assert functional.passed  # a tuple counts as a list, as in LiveCodeBench


def test_the_isolation_in_force_is_reported():
    report = run_program_tests(ADD, *TESTS, limits=FAST)
    assert report.isolation in ("namespaces", "user-namespaces", "namespaces-shared-tmp",
                                "user-namespaces-shared-tmp", "none"), report
    guarded = run_program_tests(ADD, *TESTS, limits=Limits(timeout=2, wall_seconds=12, namespaces=False))
    assert guarded.passed and guarded.isolation == "none"


@pytest.mark.parametrize("namespaces", [True, False])
def test_hostile_programs_fail_and_leave_the_host_untouched(tmp_path, namespaces):
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    # outside the test's folder too (pytest's base temp, under /tmp, which the sandbox hides behind its own)
    stray = tmp_path.parent / f"sandbox-escape-{os.getpid()}-{namespaces}"
    hostile = {
        "write outside": f"open({str(canary)!r}, 'w').write('owned')\nopen({str(stray)!r}, 'w').write('x')\n"
                         f"import shutil\nshutil.rmtree({str(tmp_path)!r})\n" + ADD,
        "socket": "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))\n" + ADD,
        "listen": "import socket\ns = socket.create_server(('127.0.0.1', 0))\n" + ADD,
        "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "10 GB": "x = bytearray(10 * 1024 ** 3)\nx[-1] = 1\n" + ADD,
        "endless loop": "while True:\n    pass\n",
        "endless sleep in a new session": "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                                          "    time.sleep(3600)\nwhile True:\n    pass\n",
    }
    limits = Limits(timeout=2, memory_bytes=1 << 30, processes=32, wall_seconds=10, namespaces=namespaces)
    before = processes()
    for name, code in hostile.items():
        start = time.monotonic()
        report = run_program_tests(code, *TESTS, limits=limits)
        assert not report.passed, (name, report)
        assert time.monotonic() - start < 20, name  # the deadline holds
    # a correct program right after still runs and passes: the run goes on
    assert run_program_tests(ADD, *TESTS, limits=limits).passed
    assert canary.read_text() == "original"
    assert not stray.exists()
    time.sleep(0.5)
    assert survivors(before) == []


def test_a_killed_run_counts_every_test_as_failed():
    report = run_program_tests("import time\ntime.sleep(30)", *TESTS,
                               limits=Limits(timeout=60, wall_seconds=1.5))
    assert report.killed and report.results == [-1, -1] and not report.passed
