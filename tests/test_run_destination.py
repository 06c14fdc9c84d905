"""A run never destroys what is at its destination: only an earlier run folder mlharness committed (its marker
file, never its name) of the same benchmark, scenario and mode is replaced; anything else is refused before the
run starts (exit 2), and the files outside and inside are hashed unchanged. A lock makes a second run to the same
destination, or a second ``submission run`` on one tree, fail at once."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlharness import cli
from mlharness.run import destination as dest
from tests.helpers.unix_socket import socket_file

RUN = ["run", "--scenario", "Offline", "--mode", "accuracy", "--count", "4", "--no-progress"]


def snapshot(root: Path) -> dict[str, str]:
    """path -> kind and content hash of everything under ``root`` (symlinks and special files not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            mode = os.lstat(p).st_mode
            if stat.S_ISREG(mode):
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISLNK(mode):
                out[str(p.relative_to(root))] = "link:" + os.readlink(p)
            else:
                out[str(p.relative_to(root))] = f"mode:{stat.S_IFMT(mode):o}"
    return out


def run(*extra: str) -> int:
    return cli.main([*RUN, *extra])


def test_a_user_folder_is_refused_and_kept(here, capsys):
    mine = here / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("my notes\n")
    (mine / "sub" / "data.bin").write_bytes(b"\0\1\2")
    before = snapshot(here)
    assert run("--output", "mine") == 2
    err = capsys.readouterr().err
    assert f"{mine} is a folder mlharness did not write" in err and "--output" in err
    assert snapshot(here) == before  # nothing added beside it either (no staging folder, no lock left)


@pytest.mark.parametrize("target", [".", "..", "sub/..", "results"])
def test_the_current_folder_its_parents_and_the_results_root_are_refused(here, capsys, target):
    (here / "sub").mkdir()
    (here / "keep.txt").write_text("keep\n")
    assert run() == 0  # an earlier result in ./results
    before = snapshot(here)
    assert run("--output", target) == 2
    err = capsys.readouterr().err
    assert "current folder" in err or "results root" in err, err
    assert snapshot(here) == before


@pytest.mark.parametrize("kind", ["file", "fifo", "device", "socket"])
def test_a_file_fifo_device_or_socket_is_refused_by_what_it_is(here, capsys, kind):
    target = here / "target"
    if kind == "file":
        target.write_text("precious\n")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a stand-in with /dev/null's numbers
    else:
        socket_file(target)
    before = snapshot(here)
    assert run("--output", str(target)) == 2
    err = capsys.readouterr().err
    words = {"file": "a file", "fifo": "a FIFO", "device": "a character device", "socket": "a socket"}[kind]
    assert f"{target} exists and is {words}" in err, err
    assert snapshot(here) == before and not list(here.glob(".target*"))


def test_a_symlink_inside_the_results_root_is_refused_and_its_target_kept(here, capsys):
    outside = here / "outside"
    outside.mkdir()
    (outside / "Offline").mkdir()
    (outside / "Offline" / "accuracy").mkdir()
    (outside / "Offline" / "accuracy" / "theirs.txt").write_text("not a result\n")
    (here / "results" / "default").mkdir(parents=True)
    (here / "results" / "default" / "demo").symlink_to(outside)
    before = snapshot(here)
    assert run() == 2
    err = capsys.readouterr().err
    assert "is a symlink" in err and str(here / "results" / "default" / "demo") in err, err
    assert snapshot(here) == before


def test_a_symlink_as_output_is_refused(here, capsys):
    (here / "real").mkdir()
    (here / "real" / "a.txt").write_text("a\n")
    (here / "link").symlink_to(here / "real")
    before = snapshot(here)
    assert run("--output", "link") == 2
    assert "is a symlink" in capsys.readouterr().err
    assert snapshot(here) == before


def test_a_rerun_replaces_its_own_result_and_keeps_what_a_user_added(here, capsys):
    assert run() == 0
    out = here / "results" / "default" / "demo" / "Offline" / "accuracy"
    marker = json.loads((out / dest.MARKER).read_text())
    assert marker["benchmark"] == "demo" and marker["mode"] == "accuracy" and "accuracy.txt" in marker["files"]
    first = (out / "mlperf_log_detail.txt").read_bytes()
    assert run() == 0  # our own earlier run: replaced
    assert (out / "mlperf_log_detail.txt").read_bytes() != first
    (out / "my-notes.txt").write_text("added by hand\n")
    assert run() == 0
    kept = list(out.parent.glob("accuracy.previous-*"))
    assert len(kept) == 1 and [p.name for p in kept[0].iterdir()] == ["my-notes.txt"], kept
    assert (kept[0] / "my-notes.txt").read_text() == "added by hand\n"
    assert not (out / "my-notes.txt").exists() and (out / "accuracy.txt").is_file()
    assert not list(out.parent.glob(".*")), list(out.parent.glob(".*"))  # no lock, staging or old folder left


def test_a_run_folder_of_another_mode_is_not_replaced(here, capsys):
    out = here / "out"
    assert run("--output", "out") == 0
    before = snapshot(here)
    assert cli.main(["run", "--scenario", "Offline", "--mode", "performance", "--min-duration-ms", "100",
                     "--output", "out", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"output {out} holds a Offline accuracy run of demo; this is a Offline performance run" in err, err
    assert snapshot(here) == before


def test_a_destination_that_changes_during_the_run_is_not_replaced(tmp_path):
    ident = dest.identity("demo", "Offline", "accuracy")
    staged, final = tmp_path / ".staged", tmp_path / "final"
    staged.mkdir()
    (staged / "mlperf_log_summary.txt").write_text("new\n")
    final.mkdir()
    (final / "someone-else.txt").write_text("appeared meanwhile\n")
    with pytest.raises(dest.DestinationError, match="did not write"):
        dest.commit(staged, final, ident)
    assert (final / "someone-else.txt").read_text() == "appeared meanwhile\n" and staged.is_dir()
    with pytest.raises(FileExistsError):
        dest.rename_noreplace(staged, final)
    assert (final / "someone-else.txt").is_file()


def test_a_second_run_to_the_same_destination_fails_at_once(here, shared_cache):
    env = {**os.environ, "MLHARNESS_CACHE": str(shared_cache)}
    env.pop("MLHARNESS_DEMO_DIR", None)
    argv = [sys.executable, "-m", "mlharness.cli", "run", "--scenario", "Offline", "--mode", "performance",
            "--min-duration-ms", "4000", "--output", "out", "--no-progress"]
    lock = dest.lock_path(here / "out")
    first = subprocess.Popen(argv, cwd=here, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not lock.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lock.exists(), first.communicate(timeout=60)
        second = subprocess.run(argv, cwd=here, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        assert f"output {here / 'out'} is in use by mlharness (pid {first.pid})" in second.stderr, second.stderr
        out, err = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    marker = json.loads((here / "out" / dest.MARKER).read_text())
    assert marker["pid"] == first.pid and all((here / "out" / f).is_file() for f in marker["files"])
    assert not lock.exists()


def test_a_second_submission_run_on_one_tree_fails_at_once(here, capsys):
    tree = here / "tree"
    (tree / ".mlharness").mkdir(parents=True)
    with dest.exclusive(tree / ".mlharness" / "lock", f"results tree {tree}"):
        rc = cli.main(["submission", "run", "--results", str(tree), "--division", "open", "--submitter", "me",
                       "--scenarios", "Offline"])
    assert rc == 2
    assert f"results tree {tree} is in use by mlharness (pid {os.getpid()})" in capsys.readouterr().err
    assert sorted(p.name for p in tree.rglob("*")) == [".mlharness"]


def test_the_lock_is_taken_again_after_release_and_names_its_holder(tmp_path):
    path = tmp_path / ".x.lock"
    with dest.exclusive(path, "x"):
        assert path.read_text() == f"mlharness (pid {os.getpid()})\n"
        with pytest.raises(dest.DestinationBusy, match=r"x is in use by mlharness \(pid"):
            with dest.exclusive(path, "x"):
                pass
    assert not path.exists()
    with dest.exclusive(path, "x"):
        pass


def test_a_symlink_loop_in_a_results_tree_is_named_not_followed(here, capsys):
    tree = here / "tree"
    (tree / "default").mkdir(parents=True)
    (tree / "default" / "self").symlink_to(Path("..") / "default")
    (tree / "default" / "loopy").symlink_to("loopy")
    (tree / ".mlharness").mkdir()
    (tree / ".mlharness" / "submission.json").write_text(json.dumps({"division": "open", "submitter": "me"}))
    before = snapshot(here)
    rc = cli.main(["submission", "package", "--results", str(tree), "--out", str(here / "pkg")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "is a symlink" in err and str(tree / "default") in err and "Traceback" not in err, err
    assert snapshot(here) == before
