"""The hostile-input battery: well over a hundred generated bad inputs, each with its expected exit status and the
words (and location) its error must hold, run together in one bounded driver process so the whole battery takes
seconds, not minutes.

The cases come from the modules that test each guard in depth (settings at the door, files that are not regular or
too large, hooks that exit, destinations a run must not destroy); the battery adds one invariant to all of them: a
refused command leaves its folder exactly as it was (every file hashed before and after; only the model cache may
grow), prints one ``error:`` and never a traceback. Cases that need a LoadGen test of their own (a hook failing
inside the test, a deadline that ends the process) run in their modules, one subprocess each."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.unix_socket import socket_file
from tests.test_files_bounded import HOSTILE_FILE_CASES, can_make, materialise
from tests.test_files_bounded import snapshot as file_snapshot
from tests.test_hooks_bounded import HOSTILE_HOOK_CASES, manifest, write_case
from tests.test_hostile_trees import REPORT_CASES, SWEEP_CASES
from tests.test_hostile_trees import tree as good_tree
from tests.test_manifest_hostile import DRIVER, run_bounded
from tests.test_settings_bounds import HOSTILE_SETTINGS_CASES

BATTERY_SECONDS = 600  # the driver's own limit: a hang fails the battery, never the suite's timeout


@dataclass
class Battery:
    id: str
    folder: Path
    argv: list[str]
    rc: int
    expect: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None


def _destination_cases(root: Path) -> list[Battery]:
    """Destinations a run must refuse before it starts, with what each must be called in the error."""
    cases = []

    def case(case_id: str, make, target: str, *expect: str, mode: str = "accuracy", cwd: str = "") -> None:
        folder = root / f"dest-{case_id}"
        folder.mkdir(parents=True)
        (folder / "model.bin").write_bytes(b"placeholder: the echo predictor never reads it")
        (folder / "m.yaml").write_text(manifest())
        make(folder)
        argv = ["run", "--manifest", str(folder / "m.yaml"), "--scenario", "Offline", "--mode", mode, "--count", "4",
                "--no-progress", "--min-duration-ms", "1", "--results-root", str(folder / "results")]
        if target:
            argv += ["--output", target.format(folder=folder)]
        cases.append(Battery(f"dest-{case_id}", folder, argv, 2, [e.format(folder=folder) for e in expect],
                             cwd=folder / cwd if cwd else folder))

    def user_folder(folder: Path) -> None:
        (folder / "mine" / "sub").mkdir(parents=True)
        (folder / "mine" / "notes.txt").write_text("the user's notes\n")
        (folder / "mine" / "sub" / "data.bin").write_bytes(os.urandom(64))

    def marker(**fields: object):
        def make(folder: Path) -> None:
            (folder / "earlier").mkdir()
            (folder / "earlier" / "mlperf_log_summary.txt").write_text("an earlier result\n")
            data = {"format": 1, "benchmark": "toy", "scenario": "Offline", "mode": "accuracy",
                    "files": ["mlperf_log_summary.txt"], **fields}
            (folder / "earlier" / ".mlharness-run.json").write_text(json.dumps(data))
        return make

    def sock(path: Path) -> None:
        socket_file(path)

    case("file", lambda f: (f / "target").write_text("precious\n"), "{folder}/target",
         "{folder}/target exists and is a file")
    case("fifo", lambda f: os.mkfifo(f / "target"), "{folder}/target", "{folder}/target exists and is a FIFO")
    case("socket", lambda f: sock(f / "target"), "{folder}/target", "{folder}/target exists and is a socket")
    if os.geteuid() == 0:
        case("chardev", lambda f: os.mknod(f / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3)), "{folder}/null",
             "{folder}/null exists and is a character device")
        case("blockdev", lambda f: os.mknod(f / "disk", stat.S_IFBLK | 0o600, os.makedev(7, 0)), "{folder}/disk",
             "{folder}/disk exists and is a block device")
    case("user-folder", user_folder, "{folder}/mine", "{folder}/mine is a folder mlharness did not write")
    case("user-subfolder", user_folder, "{folder}/mine/sub", "{folder}/mine/sub is a folder mlharness did not write")
    case("cwd", user_folder, ".", "current folder")
    case("cwd-parent", user_folder, "..", "current folder", cwd="mine")
    case("cwd-dotted", user_folder, "mine/sub/../..", "current folder")
    case("results-root", user_folder, "{folder}/results", "results root")
    case("above-results-root", user_folder, "{folder}", "current folder")
    case("symlink-to-folder", lambda f: (user_folder(f), (f / "link").symlink_to(f / "mine")), "{folder}/link",
         "{folder}/link exists and is a symlink")
    case("symlink-to-file", lambda f: ((f / "t.txt").write_text("x\n"), (f / "link").symlink_to(f / "t.txt")),
         "{folder}/link", "{folder}/link exists and is a symlink")
    case("broken-symlink", lambda f: (f / "link").symlink_to(f / "nowhere"), "{folder}/link",
         "{folder}/link exists and is a symlink")
    case("symlink-in-results-root", lambda f: (user_folder(f), (f / "results" / "default").mkdir(parents=True),
                                               (f / "results" / "default" / "toy").symlink_to(f / "mine")),
         "", "{folder}/results/default/toy inside the results root", "is a symlink")
    case("other-mode", marker(), "{folder}/earlier", "holds a Offline accuracy run of toy",
         "this is a Offline performance run of toy", mode="performance")
    case("other-benchmark", marker(benchmark="resnet50"), "{folder}/earlier", "holds a Offline accuracy run of resnet50")
    case("other-scenario", marker(scenario="Server"), "{folder}/earlier", "holds a Server accuracy run of toy")
    case("marker-not-ours", marker(format=99), "{folder}/earlier", "is a folder mlharness did not write")
    case("marker-a-fifo", lambda f: ((f / "earlier").mkdir(), os.mkfifo(f / "earlier" / ".mlharness-run.json")),
         "{folder}/earlier", "is a folder mlharness did not write")
    case("marker-a-list", lambda f: ((f / "earlier").mkdir(), (f / "earlier" / ".mlharness-run.json").write_text("[]")),
         "{folder}/earlier", "is a folder mlharness did not write")
    return cases


def _collect(root: Path) -> list[Battery]:
    cases = _destination_cases(root)
    for c in HOSTILE_SETTINGS_CASES:
        folder = root / f"settings-{c.id}"
        folder.mkdir(parents=True)
        argv, message = c.prepare(folder)
        cases.append(Battery(f"settings-{c.id}", folder, argv, c.exit, [message]))
    for c in HOSTILE_FILE_CASES:
        if not can_make(c):
            continue
        folder = root / f"file-{c.id}"
        argv = materialise(c, folder)
        cases.append(Battery(f"file-{c.id}", folder, argv, c.rc, [m.replace("{folder}", str(folder))
                                                                  for m in c.messages], env=dict(c.env)))
    for case_id, make, words in REPORT_CASES:  # result trees that report must refuse without reading for ever
        folder = root / f"tree-report-{case_id}"
        folder.mkdir(parents=True)
        make(good_tree(folder / "t"))
        cases.append(Battery(f"tree-report-{case_id}", folder, ["report", str(folder / "t")], 2, list(words)))
    for case_id, text, words in SWEEP_CASES:  # a sweep.json that sweep --resume must refuse before any run
        folder = root / f"tree-sweep-{case_id}"
        (folder / "out").mkdir(parents=True)
        (folder / "out" / "sweep.json").write_text(text)
        cases.append(Battery(f"tree-sweep-{case_id}", folder, ["sweep", "--manifest", "demo", "--qps", "150",
                                                                 "--seconds", "0.2", "--output", str(folder / "out"),
                                                                 "--resume"], 2, [words]))
    for c in HOSTILE_HOOK_CASES:
        if c.rc == 3:  # fails inside a LoadGen test (one per process), or ends the process: its module runs it
            continue
        folder = root / f"hook-{c.id}"
        path, out = write_case(c, folder)
        argv = [a.replace("{manifest}", str(path)).replace("{output}", str(out)) for a in c.args]
        cases.append(Battery(f"hook-{c.id}", folder, argv, c.rc, [e.replace("{manifest}", str(path))
                                                                  for e in c.expect]))
    return cases


DRIVER_PRELUDE = r'''
import json, os, sys
_cases = json.load(open(sys.argv[1]))
_env = dict(os.environ)
_order = iter(_cases)
_real_main = None

def _next_case_main(argv):
    case = next(_order)
    os.chdir(case["cwd"])
    os.environ.clear()
    os.environ.update({**_env, "MLHARNESS_CACHE": case["cache"], **case["env"]})
    return _real_main(argv)
'''


def test_the_battery_has_more_than_a_hundred_cases(tmp_path: Path) -> None:
    cases = _collect(tmp_path)
    assert len(cases) >= 120, len(cases)
    assert len({c.id for c in cases}) == len(cases)
    kinds = {c.id.split("-")[0] for c in cases}
    assert kinds == {"dest", "settings", "file", "hook", "tree"}, kinds


@pytest.mark.slow
def test_hostile_battery(tmp_path: Path) -> None:
    """Every case through ``mlharness.cli.main`` in one driver process: its exit status, its words, one error
    paragraph, no traceback, and the case's folder unchanged (only the model cache may grow)."""
    cases = _collect(tmp_path / "cases")
    before = {c.id: file_snapshot(c.folder, skip=("cache",)) for c in cases}
    spec = [{"id": c.id, "argv": c.argv, "cwd": str(c.cwd or c.folder), "cache": str(c.folder / "cache"),
             "env": c.env} for c in cases]
    (tmp_path / "cases.json").write_text(json.dumps(spec))
    # the shared driver, with each case run in its own folder and environment
    driver = DRIVER.replace("from mlharness import cli\n", "from mlharness import cli\n" + DRIVER_PRELUDE +
                            "_real_main, cli.main = cli.main, _next_case_main\n")
    (tmp_path / "driver.py").write_text(driver)
    started = time.monotonic()
    rc, output, seconds, _peak = run_bounded([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "cases.json"),
                                              str(tmp_path / "results.json")], tmp_path, BATTERY_SECONDS)
    assert rc == 0, output[-4000:]
    results = {r["id"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    assert len(results) == len(cases), "the driver ended early: a case ended the process"
    failures = []
    for c in cases:
        r = results[c.id]
        text = r["output"]
        problems = []
        if r["rc"] != c.rc:
            problems.append(f"exit {r['rc']}, expected {c.rc}")
        if "Traceback" in text:
            problems.append("a traceback")
        problems += [f"missing {e!r}" for e in c.expect if e not in text]
        if c.rc != 0:
            if "error:" not in text:
                problems.append("no 'error:' line")
            elif "\n\n" in text[text.index("error:"):].strip():
                problems.append("more than one error paragraph")
            after = file_snapshot(c.folder, skip=("cache",))
            if after != before[c.id]:
                changed = sorted(set(after.items()) ^ set(before[c.id].items()))
                problems.append(f"its folder changed: {changed[:4]}")
        if problems:
            failures.append(f"{c.id}: {'; '.join(problems)}\n  argv: {c.argv}\n  output: {text.strip()[-600:]}")
    print(f"{len(cases)} hostile cases in {time.monotonic() - started:.1f} s (driver {seconds:.1f} s)")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)


@pytest.mark.parametrize("case_id", ["dest-file", "dest-cwd", "dest-other-mode"])
def test_a_destination_case_holds_on_its_own(tmp_path: Path, case_id: str, capsys, monkeypatch) -> None:
    """One destination case in this process too, so a failure shows its own traceback when it has one."""
    from mlharness import cli

    (case,) = [c for c in _destination_cases(tmp_path) if c.id == case_id]
    monkeypatch.chdir(case.cwd or case.folder)
    monkeypatch.setenv("MLHARNESS_CACHE", str(case.folder / "cache"))
    before = file_snapshot(case.folder, skip=("cache",))
    assert cli.main(case.argv) == 2
    err = capsys.readouterr().err
    assert all(e in err for e in case.expect), err
    assert file_snapshot(case.folder, skip=("cache",)) == before
