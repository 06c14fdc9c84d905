"""A Ray cluster of three nodes on this host, as Ray's own tests make one (``ray.cluster_utils.Cluster``), bound
to 127.0.0.1 with no dashboard. Custom resources stand in for accelerators: node ``a`` offers ``acc_a``, node
``b`` offers ``acc_b``, node ``c`` neither; each node has one CPU. Node ``a`` is the head: kill ``b`` or ``c``.

Use the ``ray_cluster`` fixture (module-scoped: starting the nodes takes seconds); a test that kills a node gets
a cluster of its own from :func:`start_cluster`. Without Ray installed, the tests that need it are skipped with
the install command."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

# Ray rewrites a 127.0.0.1 cluster address to this host's outward IP, where nothing listens when the nodes are
# bound to the loopback; this keeps a driver on the loopback (Ray reads it as "no multi-host cluster")
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
NODES = {"a": {"acc_a": 1.0}, "b": {"acc_b": 1.0}, "c": {}}


def toy_manifest(name: str, sleep_ms: int | None = None, postprocess: str = "") -> str:
    """The echo toy the cluster tests run (four floats in, the same out, 16 samples): ``sleep_ms`` per batch in
    the framework, ``postprocess`` lines run before each sample's postprocess returns (``time`` imported)."""
    options = "" if sleep_ms is None else f", options: {{sleep_ms: {sleep_ms}}}"
    body = "".join(f"      {line}\n" for line in postprocess.splitlines())
    return f"""\
name: {name}
framework: {{name: echo{options}}}
inputs: [{{name: x, element_type: float32, shape: [4]}}]
outputs: [{{name: y, element_type: float32}}]
dataset:
  name: toy_data
  init: |
    def init(count):
        return count or 16
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      return np.full(4, index, np.float32)
postprocess: |
{"  import time" + chr(10) + chr(10) if body else ""}  def postprocess(ctx, outputs):
{body}      return outputs[0]
"""


@dataclass
class LocalRayCluster:
    cluster: Any
    address: str  # the GCS address, for RAY_ADDRESS (``--cluster auto`` connects to it)
    nodes: dict[str, Any] = field(default_factory=dict)  # "a" / "b" / "c" -> ray._private.node.Node

    def node_id(self, name: str) -> str:
        return self.nodes[name].node_id

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with RAY_ADDRESS set: a driver started with it (``--cluster auto``) joins this cluster."""
        return {**base, "RAY_ADDRESS": self.address, "RAY_USAGE_STATS_ENABLED": "0", **LOOPBACK}

    def kill(self, name: str) -> None:
        """The node dies at once, as a machine that loses power (its raylet killed, no drain)."""
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=False)

    def shutdown(self) -> None:
        self.cluster.shutdown()


def start_cluster(cpus_per_node: float = 1.0) -> LocalRayCluster:
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mlharness[cluster]'")
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    common = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    head, *rest = NODES.items()
    cluster = Cluster(initialize_head=True, head_node_args={**common, "num_cpus": cpus_per_node,
                                                            "resources": {**head[1], f"mlh_{head[0]}": 1.0}})
    local = LocalRayCluster(cluster, cluster.address, nodes={head[0]: cluster.head_node})
    try:
        for name, resources in rest:
            local.nodes[name] = cluster.add_node(num_cpus=cpus_per_node, resources={**resources, f"mlh_{name}": 1.0},
                                                 **common)
        cluster.wait_for_nodes(timeout=60)
    except BaseException:
        local.shutdown()
        raise
    del ray
    return local


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalRayCluster]:
    local = start_cluster()
    try:
        yield local
    finally:
        local.shutdown()
