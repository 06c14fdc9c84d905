"""What the Ray executor's tests share: the runs they start, the cluster of three nodes they start them on, and how
they find a run's processes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.ray_cluster import node_cache

# the fastest real run: the demo model, 16 samples, accuracy mode (about a second)
FAST = ("run", "--manifest", "demo", "--scenario", "Offline", "--mode", "accuracy", "--count", "16",
        "--no-progress")


def slow_argv(seconds: float) -> tuple[str, ...]:
    """A performance run LoadGen keeps going for ``seconds`` (a run to cancel or to kill the node under)."""
    return ("run", "--manifest", "demo", "--scenario", "SingleStream", "--mode", "performance", "--count", "16",
            "--min-duration-ms", str(int(seconds * 1000)), "--min-query-count", "1", "--no-progress")


def children_of_mlharness(marker: str) -> list[int]:
    """Processes still running an `mlharness.cli` command whose output path contains ``marker``, one per command: a
    run's supervised child (mlharness.supervise: the same command line, under its parent) is not counted again."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"mlharness.cli" in cmd and any(marker.encode() in part for part in cmd):
            found[int(pid)] = ppid
    return [pid for pid, ppid in found.items() if ppid not in found]


def three_nodes() -> Iterator[tuple[Any, dict[str, Any]]]:
    """Three nodes on this host, this process connected to them (a module fixture's body): A (the head) offers
    accel_a, B accel_b and spare, C spare."""
    ray = pytest.importorskip("ray", reason="the cluster extra is not installed: pip install 'mlharness[cluster]'")
    from ray.cluster_utils import Cluster

    common = {"include_dashboard": False}
    with node_cache() as cache:
        c = Cluster(initialize_head=True, head_node_args={**common, "num_cpus": 1, "resources": {"accel_a": 1},
                                                          "labels": {"zone": "a"}})
        nodes = {"A": c.head_node,
                 "B": c.add_node(**common, num_cpus=2, resources={"accel_b": 1, "spare": 1}, labels={"zone": "b"}),
                 "C": c.add_node(**common, num_cpus=1, resources={"spare": 1})}
    c.wait_for_nodes(timeout=60)
    ray.init(address=c.address, include_dashboard=False)
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(cache, ignore_errors=True)


def node_ids(rex: Any) -> dict[str, str]:
    """'A'/'B'/'C' -> node id, by the resources each node offers."""
    out = {}
    for n in rex.nodes():
        key = "A" if "accel_a" in n.resources else "B" if "accel_b" in n.resources else "C"
        out[key] = n.node_id
    return out
