"""A Ray cluster that loses its head, or one of its nodes, under a campaign: three nodes on this host
(tests/helpers/ray_cluster.py: node a is the head; one CPU each), each test with a cluster of its own.

Head lost (every process of node a SIGKILLed, as a machine that loses power): the driver stops waiting within 30 s
(Ray's own driver would wait 60 s on the GCS and then abort, recording nothing), prints its table and the command
that resumes, and exits 3; campaign.json keeps the finished runs `ok` and has every other `lost`, naming the head,
none `pending`; the resume against a fresh cluster runs only those. Worker node killed: its run is run again on
another node, no result is recorded as the dead node's, and nothing of the node (its Ray workers, the run) stays.
Worker nodes whose raylets give up the lost head (nothing cancelled their runs) take their runs along.

The runs that must still be running when the fault comes wait in their postprocess while a file in tmp_path
exists, so the test decides when they end; the same manifest then finishes at once on the resume."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mlharness.cluster.jobs import RunJob
from tests.helpers.ray_cluster import start_cluster, toy_manifest
from tests.test_campaign_signals import record, runs_of

# the three nodes share this host: their runs share it too, as runs on machines of their own would not wait for
# each other (mlharness/cluster/hostlock.py)
SHARE_HOST = ("--share-host",)


def held_campaign(tmp_path: Path) -> tuple[str, Path, Path, Path]:
    """(marker, hold file, campaign file, results root) of a campaign of both toys in Offline and SingleStream."""
    marker = uuid.uuid4().hex[:10]
    hold = tmp_path / "hold"
    hold.touch()
    return marker, hold, write_campaign(tmp_path / "campaign", marker, hold, "[Offline, SingleStream]"), \
        tmp_path / "results"


def keys(toy: str, marker: str) -> list[str]:
    """The job keys of a toy's two performance runs."""
    return [f"any/{toy}-{marker}/{s}/performance" for s in ("Offline", "SingleStream")]


def write_campaign(folder: Path, marker: str, hold: Path, scenarios: str) -> Path:
    """Two toy models: ``fast-<marker>`` ends at once, ``held-<marker>`` runs while ``hold`` exists."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"fast-{marker}.yaml").write_text(toy_manifest("fast", sleep_ms=1))
    wait = f"while __import__('os').path.exists({str(hold)!r}): time.sleep(0.05)"
    (folder / f"held-{marker}.yaml").write_text(toy_manifest("held", postprocess=wait))
    path = folder / "campaign.yaml"
    path.write_text(f"models: [fast-{marker}.yaml, held-{marker}.yaml]\nscenarios: {scenarios}\n"
                    "modes: [performance]\noptions: {min_duration_ms: 100, min_query_count: 1, count: 16}\n"
                    "systems:\n  - {name: any}\n")
    return path


def campaign(env: dict[str, str], path: Path, root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mlharness.cli", "campaign", "run", str(path), "--cluster", "auto", "--results",
            str(root), *SHARE_HOST, *extra]


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("mlharness_run.json")}


def wait_for(check, seconds: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.2)


def gone_within(seconds: float, found) -> dict:
    """What ``found()`` still returns after ``seconds`` (polled; empty as soon as it is)."""
    deadline = time.monotonic() + seconds
    while (left := found()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def ended(proc: subprocess.Popen, seconds: float) -> tuple[str, str, float]:
    """The driver's output and how long it took to end; killed past ``seconds``."""
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=seconds)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return out, err, time.monotonic() - start


def stop_everything(proc: subprocess.Popen | None, hold: Path, marker: str) -> None:
    """Whatever a failed assertion left running: the driver, and each run of the campaign (let go, then killed
    with its process group)."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.communicate()
    hold.unlink(missing_ok=True)
    for pid in runs_of(marker):
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.slow
def test_a_lost_head_ends_the_campaign_within_30_s_and_resume_runs_only_what_did_not_finish(tmp_path):
    marker, hold, path, root = held_campaign(tmp_path)
    fast, held = keys("fast", marker), keys("held", marker)
    cluster = start_cluster()
    proc = None
    try:
        env = cluster.env(dict(os.environ))
        gcs = cluster.address
        proc = subprocess.Popen(campaign(env, path, root), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        # the two fast runs finished; the two held ones are running, each on a node of its own
        wait_for(lambda: [record(root).get(k, {}).get("outcome") for k in fast] == ["ok", "ok"]
                 and len(runs_of(f"held-{marker}")) == 2, 120, proc, "two runs finished, two running")
        finished = mtimes(root)
        assert sorted(finished) == sorted(f"{k}/mlharness_run.json" for k in fast)
        cluster.kill_head()
        out, err, took = ended(proc, 60)
        assert took < 30, f"the driver took {took:.1f} s to end after the head was lost"
        assert proc.returncode == 3, out + err
        assert f"the Ray head at {gcs} stopped answering" in err, err
        assert "Traceback" not in err and "Failed to connect to GCS" not in err, err
        for key in fast + held:
            assert key in out  # the table, every job in it
        assert out.count("lost") >= 2 and "2 not finished" in out, out
        resume = f"mlharness campaign run {path} --results {root} --cluster auto"
        assert resume in out and "--resume" in out.split(resume, 1)[1].splitlines()[0], out
        assert resume in err and "--resume" in err, err

        jobs = record(root)
        assert {k: e["outcome"] for k, e in jobs.items()} == {**dict.fromkeys(fast, "ok"), **dict.fromkeys(held, "lost")}
        for key in held:  # never pending: not finished, saying why, and nothing of it landed
            assert f"the Ray head at {gcs} stopped answering" in jobs[key]["error"], jobs[key]
            assert not (root / key).exists()
        assert mtimes(root) == finished  # what finished is kept as it was
        # a run in flight ends with its task: force-cancelled on the driver's way out, or gone with its raylet
        assert not gone_within(15, lambda: runs_of(f"held-{marker}")), "a run outlived the lost head"
    finally:
        stop_everything(proc, hold, marker)
        cluster.shutdown()
    assert not cluster.processes(), "processes of the cluster outlived it"

    fresh = start_cluster()  # the hold is gone: the held runs now end at once
    try:
        env = fresh.env(dict(os.environ))
        resumed = subprocess.run(campaign(env, path, root, "--resume"), env=env, capture_output=True, text=True,
                                 timeout=150)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "2 run(s), 2 skipped, 0 failed" in resumed.stdout, resumed.stdout
        jobs = record(root)
        assert {k: e["outcome"] for k, e in jobs.items()} == {**dict.fromkeys(fast, "skipped"),
                                                              **dict.fromkeys(held, "ok")}
        ids = {fresh.node_id(n) for n in ("a", "b", "c")}
        assert all(jobs[k]["node"]["node_id"] in ids for k in held)  # run on the fresh cluster
        assert all(mtimes(root)[k] == v for k, v in finished.items())  # the finished runs untouched
        assert len(mtimes(root)) == 4
    finally:
        stop_everything(None, hold, marker)
        fresh.shutdown()


def scenario_of(pid: int) -> str | None:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return cmd[cmd.index(b"--scenario") + 1].decode() if b"--scenario" in cmd else None


@pytest.mark.slow
def test_a_killed_nodes_run_is_run_again_elsewhere_and_nothing_of_the_node_stays(tmp_path):
    marker, hold, path, root = held_campaign(tmp_path)
    fast = keys("fast", marker)
    cluster = start_cluster()
    proc = None
    try:
        env = cluster.env(dict(os.environ))
        proc = subprocess.Popen(campaign(env, path, root), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

        def held_runs() -> dict[int, str]:
            """Each held run's pid -> the node whose raylet started it (its worker's RAY_RAYLET_PID)."""
            out = {}
            for pid in runs_of(f"held-{marker}"):
                try:
                    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                raylet = next((e.partition(b"=")[2] for e in env if e.startswith(b"RAY_RAYLET_PID=")), b"")
                node = next((n for n, p in cluster.raylets.items() if str(p).encode() == raylet), None)
                if node is not None:
                    out[pid] = node
            return out

        # the fast runs finished; the two held ones run on two nodes (one CPU each), one of them a worker node
        wait_for(lambda: [record(root).get(k, {}).get("outcome") for k in fast] == ["ok", "ok"]
                 and len(held_runs()) == 2, 120, proc, "two runs finished, two running")
        pid, node = next((p, n) for p, n in held_runs().items() if n != "a")
        killed = f"any/held-{marker}/{scenario_of(pid)}/performance"
        dead = cluster.node_id(node)
        workers = {p: c for p, c in cluster.processes(node).items() if c.startswith("ray::")}
        assert workers, "no Ray worker of the node found"
        cluster.kill(node)
        # the node's task ends its run once its raylet is gone; none of the node's Ray workers stays
        assert not gone_within(10, lambda: [p for p in runs_of(f"held-{marker}") if p == pid]), \
            "the dead node's run outlived it"
        assert not gone_within(10, lambda: set(workers) & set(cluster.processes(node))), \
            f"Ray workers of the dead node outlived it: {workers}"
        # the job runs again on the node left free; both end once let go
        wait_for(lambda: len(held_runs()) == 2 and node not in held_runs().values(), 90, proc,
                 "the killed run started again on another node")
        hold.unlink()
        out, err, _ = ended(proc, 120)
        assert proc.returncode == 0, out + err
    finally:
        stop_everything(proc, hold, marker)
        cluster.shutdown()
    assert not cluster.processes(), "processes of the cluster outlived it"
    jobs = record(root)
    assert all(e["outcome"] == "ok" for e in jobs.values()), jobs
    assert jobs[killed]["attempts"] == 2 and jobs[killed]["node"]["node_id"] != dead, jobs[killed]
    meta = json.loads((root / killed / "mlharness_run.json").read_text())
    assert meta["executor"]["node_id"] == jobs[killed]["node"]["node_id"]  # the run names the node that ran it
    assert not list(root.rglob("*.failed-*")) and not list(root.rglob(".*.landing-*"))


@pytest.mark.slow
def test_runs_end_with_their_raylet_when_it_gives_up_a_lost_head(tmp_path, monkeypatch):
    """Nothing cancels the runs here (the driver is killed with the head): the worker nodes' raylets stop once
    their GCS has been gone 3 s (Ray's gcs_rpc_server_reconnect_timeout_s, 60 s by default), and each run and the
    Ray worker running its task must end with them: Ray leaves a worker busy in a task running when its raylet
    stops so, and the run with it."""
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "3")  # the nodes' processes, started from here
    marker, hold, path, root = held_campaign(tmp_path)
    cluster = start_cluster()
    proc = None
    try:
        env = cluster.env(dict(os.environ))
        proc = subprocess.Popen(campaign(env, path, root), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        wait_for(lambda: len(runs_of(f"held-{marker}")) == 2, 120, proc, "the held runs running")
        # the Ray workers running the tasks (Ray's own agents of a raylet that gave up its GCS stay behind it:
        # shutdown() kills them)
        workers = {p: c for p, c in cluster.processes("b", "c").items() if c.startswith("ray::run_task")}
        assert workers, "no Ray worker of nodes b and c runs a task"
        cluster.kill_head()
        proc.kill()  # a driver that is gone with the head: no run is cancelled
        proc.communicate()
        raylets = [cluster.raylets[n] for n in ("b", "c")]
        assert not gone_within(30, lambda: set(raylets) & set(cluster.processes("b", "c"))), \
            "the worker nodes' raylets did not stop without their GCS"
        assert not gone_within(10, lambda: runs_of(f"held-{marker}")), "a run outlived its raylet"
        assert not gone_within(10, lambda: set(workers) & set(cluster.processes("b", "c"))), \
            "a Ray worker running a task outlived its raylet"
    finally:
        stop_everything(proc, hold, marker)
        cluster.shutdown()
    assert not cluster.processes(), "processes of the cluster outlived it"


def test_the_head_watch_says_lost_once_the_head_stops_answering():
    from mlharness.cluster.connect import HeadWatch

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    address = f"127.0.0.1:{server.getsockname()[1]}"
    watch = HeadWatch(address, after=1.0)
    try:
        time.sleep(1.5)
        assert not watch.lost.is_set() and watch.reason is None  # it answers: not lost
        server.close()
        closed = time.monotonic()
        assert watch.lost.wait(5), "the head watch did not see the head go"
        assert time.monotonic() - closed < 3
        assert f"the Ray head at {address} stopped answering" in watch.reason
        assert "MLHARNESS_HEAD_LOST_AFTER" in watch.reason
    finally:
        watch.stop()
        server.close()


def test_a_result_from_a_node_ray_reports_dead_is_kept_as_a_failed_run(tmp_path):
    """The driver's side: whatever a dead node sent back lands as ``.failed-*``, never as that node's result."""
    from mlharness.cluster.jobs import NodeInfo
    from mlharness.cluster.ray_executor import RayExecutor
    from mlharness.cluster.tarball import pack

    run = tmp_path / "run"
    run.mkdir()
    (run / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
    dead = NodeInfo(node_id="d" * 56, address="10.0.0.5", alive=False)
    ex = RayExecutor.__new__(RayExecutor)  # only what _land reads: the node list
    ex.nodes = lambda: [dead]
    job = RunJob(key="k", argv=("run",), dest="sys/m/Offline/performance")
    got = {"ok": True, "rc": 0, "error": None, "tar": pack(run), "node_id": dead.node_id, "address": dead.address}
    outcome = ex._land(job, got, tmp_path / "results", 1, time.time())
    assert not outcome.ok and outcome.node is not None and not outcome.node.alive
    assert "dddddddddddd (10.0.0.5)" in outcome.error and "gone" in outcome.error
    assert outcome.folder.name.startswith("performance.failed-")
    assert (outcome.folder / "mlperf_log_summary.txt").is_file()
    assert not (tmp_path / "results" / job.dest).exists()


def test_a_task_sees_its_raylet_die(tmp_path):
    from mlharness.cluster.ray_tasks import raylet_gone

    assert not raylet_gone(os.getppid(), os.getppid())  # its parent, alive
    was = os.getppid() + 1  # the parent as the task started, now another: handed on, so that parent is gone
    assert raylet_gone(was, was)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert raylet_gone(zombie.pid, os.getppid())  # dead, not yet reaped
    zombie.wait()
    assert raylet_gone(zombie.pid, os.getppid())  # gone
    assert not raylet_gone(os.getpid(), os.getppid())  # another process, alive
