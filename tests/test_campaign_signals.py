"""A campaign driver stopped by SIGINT/SIGTERM, and resumed after a node died, on a Ray cluster of three nodes on this
host (tests/helpers/ray_cluster.py: node a offers acc_a, b acc_b, c neither; one CPU each).

SIGINT stops every run on the nodes within seconds (no `mlharness.cli run` process of the campaign is left), keeps
what finished untouched, records the stopped runs as cancelled in campaign.json and exits 130 (SIGTERM: 143). A
campaign resumed after a node died reports the runs pinned to that node (`on: each`) as "node gone, not rerun"
instead of failing the whole plan, and runs the rest. The last test kills node c: keep it last."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.ray_cluster import ray_cluster, start_cluster, toy_manifest  # noqa: F401 - the fixture


def write_campaign(folder: Path, models: dict[str, int], scenarios: str, systems: str, ms: int = 200) -> Path:
    """A campaign of toy models (file stem -> sleep per batch in ms); stems carry a unique marker, so this
    campaign's processes are told apart from any other's by their command line."""
    folder.mkdir(parents=True, exist_ok=True)
    for stem, sleep_ms in models.items():
        (folder / f"{stem}.yaml").write_text(toy_manifest(stem.split("-")[0], sleep_ms=sleep_ms))
    path = folder / "campaign.yaml"
    path.write_text(f"models: [{', '.join(f'{s}.yaml' for s in models)}]\nscenarios: {scenarios}\n"
                    f"modes: [performance]\noptions: {{min_duration_ms: {ms}, min_query_count: 1, count: 16}}\n"
                    f"systems:\n{systems}")
    return path


def runs_of(marker: str) -> list[int]:
    """Processes running `mlharness.cli run` of a manifest whose file name holds ``marker`` (on any node); a run's
    supervised child (mlharness.supervise: the same command line, under its parent) is not counted again."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"mlharness.cli" in cmd and b"run" in cmd and any(marker.encode() in part for part in cmd):
            found[int(pid)] = ppid
    return [pid for pid, ppid in found.items() if ppid not in found]


def record(root: Path) -> dict[str, dict]:
    try:
        return {e["key"]: e for e in json.loads((root / "campaign.json").read_text())["jobs"]}
    except (OSError, ValueError, KeyError):
        return {}


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()
            and ".failed-" not in str(p) and p.name != "campaign.json"
            and not p.name.startswith("mlharness_results.sqlite")}  # the root's index, written as each run lands


def start(env: dict[str, str], path: Path, root: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mlharness.cli", "campaign", "run", str(path), "--cluster", "auto",
                             "--results", str(root), *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(check, seconds: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"not reached within {seconds} s"
        time.sleep(0.2)


def stop(proc: subprocess.Popen, sig: int, marker: str) -> tuple[str, str, float]:
    """Send ``sig``; the driver's output and how long it took to end. No run of the campaign may outlive it."""
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - sent
    deadline = time.monotonic() + 10  # the node-side watchers kill a cancelled worker's run within a second
    while runs_of(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not runs_of(marker), f"runs of the campaign outlived the driver's {signal.Signals(sig).name}"
    return out, err, took


def test_sigint_stops_every_remote_run_keeps_what_finished_and_exits_130(ray_cluster, tmp_path):  # noqa: F811
    env = ray_cluster.env(dict(os.environ))
    marker = uuid.uuid4().hex[:10]
    fast, slow = f"fast-{marker}", f"slow-{marker}"
    path = write_campaign(tmp_path, {fast: 1, slow: 60000}, "[Offline, SingleStream]", "  - {name: any}\n")
    root = tmp_path / "results"
    proc = start(env, path, root, "--share-host")  # the nodes share this host; the runs in flight share it too
    try:
        # the two fast runs finish; the two slow ones are running on their nodes (one CPU each: 3 at a time)
        wait_for(lambda: sum(e["outcome"] == "ok" for e in record(root).values()) == 2
                 and len(runs_of(slow)) == 2, 120, proc)
        finished = mtimes(root)
        out, err, took = stop(proc, signal.SIGINT, marker)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out + err
    assert took < 10, f"the driver took {took:.1f} s to stop"
    assert "SIGINT" in err and "interrupted" in err
    jobs = record(root)
    assert {k: e["outcome"] for k, e in jobs.items()} == {
        f"any/{fast}/Offline/performance": "ok", f"any/{fast}/SingleStream/performance": "ok",
        f"any/{slow}/Offline/performance": "cancelled", f"any/{slow}/SingleStream/performance": "cancelled"}
    assert all("cancelled" in jobs[f"any/{slow}/{s}/performance"]["error"] for s in ("Offline", "SingleStream"))
    assert mtimes(root) == finished  # what finished is untouched, nothing of the stopped runs landed
    for scenario in ("Offline", "SingleStream"):
        assert (root / f"any/{fast}/{scenario}/performance/mlperf_log_summary.txt").is_file()
        assert not (root / f"any/{slow}/{scenario}/performance").exists()
    assert "cancelled" in out  # the table says so


def test_sigterm_stops_the_campaign_with_143(ray_cluster, tmp_path):  # noqa: F811
    env = ray_cluster.env(dict(os.environ))
    marker = uuid.uuid4().hex[:10]
    path = write_campaign(tmp_path, {f"slow-{marker}": 60000}, "[Offline]", "  - {name: b, accelerator: acc_b}\n")
    root = tmp_path / "results"
    proc = start(env, path, root)
    try:
        wait_for(lambda: len(runs_of(marker)) == 1, 90, proc)
        out, err, took = stop(proc, signal.SIGTERM, marker)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143 and took < 10, (took, out + err)
    assert [e["outcome"] for e in record(root).values()] == ["cancelled"]


@pytest.mark.slow
def test_resume_after_a_node_died_reports_its_pinned_runs_and_resumes_the_rest(tmp_path):
    cluster = start_cluster()  # a cluster of its own: the test kills one of its nodes
    try:
        env = cluster.env(dict(os.environ))
        marker = uuid.uuid4().hex[:10]
        toy = f"toy-{marker}"
        path = write_campaign(tmp_path, {toy: 1}, "[Offline]", "  - {name: all, on: each}\n  - {name: any}\n", ms=2500)
        root = tmp_path / "results"
        dead = cluster.node_id("c")
        proc = start(env, path, root, "--share-host")  # three runs at once on the nodes that share this host
        try:  # node c dies under its run
            wait_for(lambda: len(runs_of(marker)) == 3, 120, proc)
            cluster.kill("c")
            out, err = proc.communicate(timeout=150)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 3, out + err
        jobs = record(root)
        on_c = f"all@{dead[:12]}/{toy}/Offline/performance"
        assert jobs[on_c]["outcome"] == "failed" and dead[:12] in jobs[on_c]["error"]
        assert sum(e["outcome"] == "ok" for e in jobs.values()) == 3
        # one finished run lost since (as if it never ran): the resume runs it again, and only it
        redo = f"any/{toy}/Offline/performance"
        shutil.rmtree(root / redo)
        before = mtimes(root)

        resumed = subprocess.run([sys.executable, "-m", "mlharness.cli", "campaign", "run", str(path), "--cluster",
                                  "auto", "--results", str(root), "--resume"], env=env, capture_output=True, text=True,
                                 timeout=150)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        jobs = record(root)
        assert jobs[on_c]["outcome"] == "node gone, not rerun" and "gone" in jobs[on_c]["error"]
        assert jobs[on_c]["pinned"] == dead
        assert jobs[redo]["outcome"] == "ok" and (root / redo / "mlharness_run.json").is_file()
        assert sorted(e["outcome"] for k, e in jobs.items() if k not in (on_c, redo)) == ["skipped", "skipped"]
        assert all(mtimes(root)[k] == v for k, v in before.items())  # nothing finished redone
        assert "node gone, not rerun" in resumed.stdout and "1 not rerun" in resumed.stdout
    finally:
        cluster.shutdown()
