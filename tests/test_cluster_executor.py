"""The executors: jobs run as real `mlharness` processes, land in one results tree, name their node; faults.

The local backend runs here as it does for users. The Ray backend runs on a Ray cluster of three nodes started on
this host (``ray.cluster_utils.Cluster``, bound to 127.0.0.1), with custom resources standing in for accelerators:
node A offers ``accel_a``, node B ``accel_b``, node C neither. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from mlharness.cluster.jobs import Constraints, RunJob
from mlharness.cluster.local import LocalExecutor
from mlharness.paths import MANIFESTS_DIR
from tests.helpers.cluster_jobs import FAST, children_of_mlharness, node_ids, slow_argv, three_nodes


def failing_manifest() -> bytes:
    """The demo manifest whose postprocess raises on its second batch: the run fails after LoadGen started, so
    it leaves partial logs."""
    text = (MANIFESTS_DIR / "demo" / "demo.yaml").read_text()
    old = "  def postprocess(ctx, outputs):\n"
    assert text.count(old) == 1
    return text.replace(old, "  CALLS = [0]\n\n" + old + "      CALLS[0] += 1\n      if CALLS[0] >= 2:\n"
                        "          raise ValueError(\"boom on purpose\")\n").encode()


FAILING = RunJob(key="failing", dest="sys/failing/Offline/accuracy",
                 argv=("run", "--manifest", "demo_failing.yaml", "--scenario", "Offline", "--mode", "accuracy",
                       "--count", "64", "--no-progress"),
                 files=(("demo_failing.yaml", failing_manifest()),))


def metadata(folder: Path) -> dict:
    return json.loads((folder / "mlharness_run.json").read_text())


@pytest.fixture(autouse=True)
def _cache(shared_cache, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))  # the demo model generated once per session


# -- local -------------------------------------------------------------------------------------------------------
def test_local_runs_jobs_in_order_lands_them_and_names_the_node(tmp_path):
    ex = LocalExecutor()
    node = ex.nodes()[0]
    assert node.facts["cpu_count"] and node.facts["frameworks"].get("onnxruntime")
    assert ex.matching(Constraints(accelerator="accel_a")) == []
    jobs = [RunJob(key=f"k{i}", argv=FAST, dest=f"sys/demo/Offline/accuracy{i}") for i in range(2)]
    jobs.append(RunJob(key="nowhere", argv=FAST, dest="sys/demo/nowhere", constraints=Constraints(accelerator="x")))
    done = []
    outcomes = ex.run_all(jobs, tmp_path, on_done=done.append)
    assert [o.job.key for o in outcomes] == ["k0", "k1", "nowhere"] == [o.job.key for o in done]
    for o in outcomes[:2]:
        assert o.ok and o.rc == 0 and o.folder == tmp_path / o.job.dest, o.error
        md = metadata(o.folder)
        assert md["executor"] == {"backend": "local", "node_id": node.node_id, "node_address": "localhost"}
        assert (o.folder / "mlperf_log_accuracy.json").is_file()
    assert outcomes[0].finished_unix <= outcomes[1].started_unix  # one at a time
    assert not outcomes[2].ok and "no node meets" in outcomes[2].error and "1 × x" in outcomes[2].error
    assert not list(tmp_path.glob(".mlharness-job-*"))  # the working folders are gone


def test_local_never_replaces_a_result_and_skips_when_asked(tmp_path):
    dest = tmp_path / "sys/demo/acc"
    dest.mkdir(parents=True)
    (dest / "mine.txt").write_text("earlier")
    job = RunJob(key="k", argv=FAST, dest="sys/demo/acc")
    [o] = LocalExecutor().run_all([job], tmp_path)
    assert not o.ok and o.rc is None and str(dest) in o.error and "never replaced" in o.error
    [o] = LocalExecutor(skip_existing=True).run_all([job], tmp_path)
    assert o.ok and o.skipped and o.folder == dest
    assert (dest / "mine.txt").read_text() == "earlier" and sorted(p.name for p in dest.iterdir()) == ["mine.txt"]
    [o] = LocalExecutor().run_all([RunJob(key="bad", argv=FAST, dest="../escape")], tmp_path)
    assert not o.ok and "'..'" in o.error


def test_local_failed_run_keeps_partial_logs_as_failed_folder(tmp_path):
    [o] = LocalExecutor().run_all([FAILING], tmp_path)
    assert not o.ok and o.rc not in (0, None)
    assert "boom on purpose" in o.error and "on node local:" in o.error
    assert not (tmp_path / FAILING.dest).exists()
    assert o.folder.name.startswith("accuracy.failed-") and o.folder.parent == (tmp_path / FAILING.dest).parent
    assert "boom on purpose" in (o.folder / "console.log").read_text()
    assert (o.folder / "mlperf_log_detail.txt").is_file()  # LoadGen had started: its partial log came back


def test_local_cancel_stops_the_run_within_seconds(tmp_path):
    ex = LocalExecutor()
    jobs = [RunJob(key="long", argv=slow_argv(60), dest="sys/long"), RunJob(key="next", argv=FAST, dest="sys/next")]
    result = {}
    t = threading.Thread(target=lambda: result.update(out=ex.run_all(jobs, tmp_path)), daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not children_of_mlharness(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert children_of_mlharness(str(tmp_path)), "the run never started"
    time.sleep(1.0)
    cancelled = time.monotonic()
    ex.cancel()
    t.join(15)
    assert not t.is_alive() and time.monotonic() - cancelled < 8
    assert not children_of_mlharness(str(tmp_path))
    long, nxt = result["out"]
    assert not long.ok and "stopped" in long.error and long.folder.name.startswith("long.failed-")
    assert not nxt.ok and nxt.attempts == 0 and "cancelled" in nxt.error
    assert not (tmp_path / "sys/next").exists()


# -- ray ---------------------------------------------------------------------------------------------------------
# Ray binds its nodes to the address it reads as this host's (by default the one routing to the internet); with
# this set before Ray is imported, every node and worker of the test cluster uses 127.0.0.1 instead
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray", reason="the cluster extra is not installed: pip install 'mlharness[cluster]'")


@pytest.fixture(scope="module")
def cluster():
    yield from three_nodes()


@pytest.fixture(scope="module")
def rex(cluster):
    from mlharness.cluster.ray_executor import RayExecutor

    ex = RayExecutor(cluster[0].address)
    yield ex
    ex.close()


def test_ray_nodes_have_facts_and_jobs_land_where_their_constraints_allow(rex, tmp_path):
    ids = node_ids(rex)
    nodes = rex.nodes()
    assert len(nodes) == 3 and all(n.alive and n.address == "127.0.0.1" for n in nodes)
    assert all(n.facts["cpu_count"] and n.facts["frameworks"].get("onnxruntime") for n in nodes)
    assert {n.node_id for n in rex.matching(Constraints(labels=(("zone", "b"),)))} == {ids["B"]}
    assert {n.node_id for n in rex.matching(Constraints(accelerator="spare"))} == {ids["B"], ids["C"]}
    want = {"on-a": (Constraints(accelerator="accel_a"), {"A"}),
            "on-b": (Constraints(labels=(("zone", "b"),)), {"B"}),
            "spare": (Constraints(accelerator="spare", frameworks=(("onnxruntime", ">=1.0"),)), {"B", "C"}),
            "pinned-c": (Constraints(node=ids["C"]), {"C"})}
    jobs = [RunJob(key=k, argv=FAST, dest=f"sys/{k}/Offline/accuracy", constraints=c) for k, (c, _) in want.items()]
    jobs.append(RunJob(key="huge", argv=FAST, dest="sys/huge", constraints=Constraints(min_memory_gb=1e6)))
    outcomes = rex.run_all(jobs, tmp_path)
    for o in outcomes[:4]:
        assert o.ok and o.folder == tmp_path / o.job.dest, o.error
        allowed = {ids[k] for k in want[o.job.key][1]}
        assert o.node.node_id in allowed
        md = metadata(o.folder)
        assert md["executor"] == {"backend": "ray", "node_id": o.node.node_id, "node_address": "127.0.0.1"}
        assert md["host"]["cpu_model"] == o.node.facts["cpu_model"]
    huge = outcomes[4]
    assert not huge.ok and "no node meets" in huge.error and "GB memory" in huge.error
    assert not (tmp_path / "sys/huge").exists()


def test_ray_failed_run_comes_back_as_failed_folder_with_logs(rex, tmp_path):
    [o] = rex.run_all([FAILING], tmp_path)
    assert not o.ok and "boom on purpose" in o.error and o.node.node_id[:12] in o.error
    assert o.folder.name.startswith("accuracy.failed-") and not (tmp_path / FAILING.dest).exists()
    assert "boom on purpose" in (o.folder / "console.log").read_text()
    assert (o.folder / "mlperf_log_detail.txt").is_file()


def test_cluster_nodes_command_lists_every_node_with_facts(cluster, shared_cache):
    import subprocess
    import sys

    env = {**os.environ, "MLHARNESS_CACHE": str(shared_cache)}
    cmd = [sys.executable, "-m", "mlharness.cli", "cluster", "nodes", "--cluster", cluster[0].address]
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=90, env=env)
    assert r.returncode == 0, r.stderr
    nodes = json.loads(r.stdout)
    assert len(nodes) == 3
    assert sorted(n["resources"].get("accel_a", 0) + n["resources"].get("accel_b", 0) for n in nodes) == [0, 1, 1]
    assert all(n["facts"]["cpu_count"] and n["facts"]["memory_gb"] for n in nodes)
    assert {n["labels"].get("zone") for n in nodes} == {"a", "b", None}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env)
    assert r.returncode == 0 and "accel_b" in r.stdout and "onnxruntime" in r.stdout, r.stdout + r.stderr


def test_ray_cancel_stops_every_run_within_seconds(cluster, tmp_path):
    from mlharness.cluster.ray_executor import RayExecutor

    rex = RayExecutor(cluster[0].address)  # a cancelled executor starts nothing more: one of its own
    # the three nodes share this host: the runs share it too (share_host), as runs on machines of their own
    jobs = [RunJob(key=f"long{i}", argv=slow_argv(60), dest=f"sys/long{i}", share_host=True) for i in range(2)]
    result = {}
    t = threading.Thread(target=lambda: result.update(out=rex.run_all(jobs, tmp_path)), daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while len(children_of_mlharness("mlharness-job-")) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(children_of_mlharness("mlharness-job-")) >= 2, "the runs never started"
    cancelled = time.monotonic()
    rex.cancel()
    t.join(20)
    assert not t.is_alive()
    while children_of_mlharness("mlharness-job-") and time.monotonic() - cancelled < 10:
        time.sleep(0.2)
    assert not children_of_mlharness("mlharness-job-"), "a run outlived its cancelled task"
    assert time.monotonic() - cancelled < 10
    assert all(not o.ok and "cancelled" in o.error for o in result["out"])
    assert not list(tmp_path.glob("sys/long*"))


def test_sigint_cancels_the_executor_and_raises_after_run_all(tmp_path):
    import signal

    from mlharness.cluster.signals import Cancelled, cancel_on_signals

    ex = LocalExecutor()
    jobs = [RunJob(key="long", argv=slow_argv(60), dest="sys/long")]

    def interrupt_once_started() -> None:
        deadline = time.monotonic() + 30
        while not children_of_mlharness(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)
    threading.Thread(target=interrupt_once_started, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(Cancelled) as info, cancel_on_signals(ex):
        outcomes = ex.run_all(jobs, tmp_path)
    assert info.value.exit_code == 130 and time.monotonic() - started < 30
    assert not outcomes[0].ok and "stopped" in outcomes[0].error
    assert not children_of_mlharness(str(tmp_path))
    assert signal.getsignal(signal.SIGINT) is before  # the handlers are handed back


def test_without_ray_cluster_says_how_to_install_it(tmp_path, shared_cache):
    import subprocess
    import sys

    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\", name='ray')\n")
    env = {**os.environ, "MLHARNESS_CACHE": str(shared_cache),
           "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "mlharness.cli", "cluster", "nodes", "--cluster", "auto"],
                       capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert r.returncode == 2 and "pip install 'mlharness[cluster]'" in r.stderr, r.stderr


def test_a_folder_past_the_shipping_bound_comes_back_as_its_logs(tmp_path):
    from mlharness.cluster.tarball import NOT_SHIPPED, pack_bounded, unpack

    run = tmp_path / "run"
    run.mkdir()
    (run / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
    (run / "big.bin").write_bytes(os.urandom(3 << 20))
    data, why = pack_bounded(run, "node-x", limit=1 << 20)
    assert why and "node-x" in why and str(run) in why
    back = tmp_path / "back"
    back.mkdir()
    unpack(data, back)
    assert sorted(p.name for p in back.iterdir()) == [NOT_SHIPPED, "mlperf_log_summary.txt"]
    assert "big.bin" in (back / NOT_SHIPPED).read_text()
    assert pack_bounded(run, "node-x", limit=10 << 20)[1] is None
