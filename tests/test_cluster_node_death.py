"""A Ray node that dies under its runs: on a cluster of three nodes of this module's own (the others' tests keep
theirs whole, in whatever order they run), bound to 127.0.0.1; every wait is bounded."""

from __future__ import annotations

import os
import threading
import time

import pytest

from mlharness.cluster.jobs import Constraints, RunJob
from tests.helpers.cluster_jobs import FAST, children_of_mlharness, node_ids, slow_argv, three_nodes

# Ray binds its nodes to the address it reads as this host's; with this set before Ray is imported, every node and
# worker of the test cluster uses 127.0.0.1
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
pytest.importorskip("ray", reason="the cluster extra is not installed: pip install 'mlharness[cluster]'")


# the spare runs' length: all three runs must be seen running at once, on a host where each Ray worker and run
# takes seconds to start (two spare runs of 4 s were never seen together with the third on a loaded machine)
SPARE_S = 15


@pytest.fixture(autouse=True)
def _cache(shared_cache, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))  # the demo model generated once per session


@pytest.fixture(scope="module")
def cluster():
    yield from three_nodes()


def test_ray_node_death_reruns_elsewhere_or_fails_naming_the_node(cluster, tmp_path):
    """Node B dies under two runs: the one only B can run (accel_b) fails naming B; the 'spare' run B was
    running (B and C both offer spare; the other spare run holds C) runs again on C. Finished runs are untouched.
    The cluster is this module's alone: it loses node B."""
    from mlharness.cluster.ray_executor import RayExecutor

    c, nodes = cluster
    rex = RayExecutor(c.address)
    ids = node_ids(rex)
    [first] = rex.run_all([RunJob(key="done", argv=FAST, dest="sys/done", constraints=Constraints(accelerator="accel_a"))],
                          tmp_path)
    assert first.ok, first.error
    before = {p: p.stat().st_mtime_ns for p in first.folder.iterdir()}
    # the three nodes share this host: the runs share it too (share_host), as runs on machines of their own
    jobs = [RunJob(key="only-b", argv=slow_argv(60), dest="sys/only-b", constraints=Constraints(accelerator="accel_b"),
                   share_host=True),
            RunJob(key="spare1", argv=slow_argv(SPARE_S), dest="sys/spare1",
                   constraints=Constraints(accelerator="spare"), share_host=True),
            RunJob(key="spare2", argv=slow_argv(SPARE_S), dest="sys/spare2",
                   constraints=Constraints(accelerator="spare"), share_host=True)]
    result = {}
    t = threading.Thread(target=lambda: result.update(out=rex.run_all(jobs, tmp_path)), daemon=True)
    t.start()
    deadline, seen = time.monotonic() + 60, []
    while time.monotonic() < deadline and len(children_of_mlharness("mlharness-job-")) < 3:
        seen.append(len(children_of_mlharness("mlharness-job-")))
        time.sleep(0.2)
    assert len(children_of_mlharness("mlharness-job-")) >= 3, f"the runs never ran together: at most {max(seen)}"
    c.remove_node(nodes["B"])
    t.join(90 + 2 * SPARE_S)
    assert not t.is_alive()
    only_b, spare1, spare2 = result["out"]
    assert not only_b.ok and ids["B"][:12] in only_b.error and "no node meets" in only_b.error
    assert not (tmp_path / "sys/only-b").exists()
    assert spare1.ok and spare2.ok, (spare1.error, spare2.error)
    assert sorted([spare1.attempts, spare2.attempts]) == [1, 2]
    assert {spare1.node.node_id, spare2.node.node_id} == {ids["C"]}
    assert {p: p.stat().st_mtime_ns for p in first.folder.iterdir()} == before
    deadline = time.monotonic() + 10
    while children_of_mlharness("mlharness-job-") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not children_of_mlharness("mlharness-job-"), "a run outlived its dead node"
