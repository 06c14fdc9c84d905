"""A Ray cluster of three nodes on this host, as Ray's own tests make one (``ray.cluster_utils.Cluster``), bound
to 127.0.0.1 with no dashboard. Custom resources stand in for accelerators: node ``a`` offers ``acc_a``, node
``b`` offers ``acc_b``, node ``c`` neither; each node has one CPU. Node ``a`` is the head: kill ``b`` or ``c``.

Use the ``ray_cluster`` fixture (module-scoped: starting the nodes takes seconds); a test that kills a node gets
a cluster of its own from :func:`start_cluster`. Without Ray installed, the tests that need it are skipped with
the install command.

Every process of a cluster (its raylets and GCS name its session folder; each Ray worker and agent holds its logs
there open, and a worker carries its raylet's pid in ``RAY_RAYLET_PID``) is found by
:meth:`LocalRayCluster.processes`, so a test can say what outlived a node, and :meth:`LocalRayCluster.shutdown`
kills whatever Ray's own shutdown leaves behind (the workers and agents of a raylet that lost its GCS are not
stopped by Ray)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
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


def _raylet_pid(node: Any) -> int:
    return node.all_processes["raylet"][0].process.pid


def _process(pid: str, session_dir: str) -> tuple[str, str | None] | None:
    """(command line, RAY_RAYLET_PID) of a live process (not a zombie) of the cluster whose session folder is
    ``session_dir``: its command line names the folder, or it holds a file there open. None otherwise."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        fds = os.listdir(f"/proc/{pid}/fd")
    except (OSError, IndexError):
        return None
    if state == "Z":
        return None
    if session_dir not in cmd:
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(session_dir + "/"):
                    break
            except OSError:
                continue
        else:
            return None
    raylet = next((e.partition(b"=")[2].decode() for e in env if e.startswith(b"RAY_RAYLET_PID=")), None)
    return cmd, raylet


@dataclass
class LocalRayCluster:
    cluster: Any
    address: str  # the GCS address, for RAY_ADDRESS (``--cluster auto`` connects to it)
    nodes: dict[str, Any] = field(default_factory=dict)  # "a" / "b" / "c" -> ray._private.node.Node
    session_dir: str = ""  # the cluster's folder under Ray's temp dir; its raylets' and GCS's command lines name it
    raylets: dict[str, int] = field(default_factory=dict)  # "a" / "b" / "c" -> its raylet's pid, kept once it dies
    cache: str = ""  # the nodes' MLHARNESS_CACHE (see :func:`node_cache`), removed at shutdown

    def node_id(self, name: str) -> str:
        return self.nodes[name].node_id

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with RAY_ADDRESS set: a driver started with it (``--cluster auto``) joins this cluster."""
        return {**base, "RAY_ADDRESS": self.address, "RAY_USAGE_STATS_ENABLED": "0", **LOOPBACK}

    def kill(self, name: str) -> None:
        """The node dies at once, as a machine that loses power (its raylet killed, no drain)."""
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=False)

    def kill_head(self) -> None:
        """The head (node ``a``) dies at once: its GCS, raylet and every other process it started, SIGKILLed."""
        self.nodes.pop("a").kill_all_processes(check_alive=False, allow_graceful=False, wait=True)

    def processes(self, *names: str) -> dict[int, str]:
        """pid -> command line of every live process of this cluster; with ``names``, only the raylets of those
        nodes and the Ray workers they started."""
        raylets = {str(pid) for name, pid in self.raylets.items() if name in names}
        found = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            seen = _process(pid, self.session_dir) if self.session_dir else None
            if seen is not None and (not names or pid in raylets or seen[1] in raylets):
                found[int(pid)] = seen[0]
        found.pop(os.getpid(), None)  # the process that started the nodes holds their logs open too
        return found

    def shutdown(self) -> None:
        """Ray's shutdown of every node, then SIGKILL to whatever of the cluster is still running (bounded)."""
        try:
            self.cluster.shutdown()
        finally:
            deadline = time.monotonic() + 10
            while (left := self.processes()) and time.monotonic() < deadline:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.1)
            if self.cache:
                shutil.rmtree(self.cache, ignore_errors=True)


@contextlib.contextmanager
def node_cache() -> Iterator[str]:
    """A cache folder of the cluster's own, in MLHARNESS_CACHE while its nodes start (their workers inherit it):
    what runs on the nodes (the host's run lock among it) stays in a scratch folder, and two clusters of parallel
    tests never take turns on one lock."""
    cache = tempfile.mkdtemp(prefix="mlharness-ray-cache-")
    before = os.environ.get("MLHARNESS_CACHE")
    os.environ["MLHARNESS_CACHE"] = cache
    try:
        yield cache
    finally:
        if before is None:
            os.environ.pop("MLHARNESS_CACHE", None)
        else:
            os.environ["MLHARNESS_CACHE"] = before


def start_cluster(cpus_per_node: float = 1.0) -> LocalRayCluster:
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'mlharness[cluster]'")
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    common = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    head, *rest = NODES.items()
    with node_cache() as cache:
        cluster = Cluster(initialize_head=True, head_node_args={**common, "num_cpus": cpus_per_node,
                                                                "resources": {**head[1], f"mlh_{head[0]}": 1.0}})
        local = LocalRayCluster(cluster, cluster.address, nodes={head[0]: cluster.head_node},
                                session_dir=cluster.head_node.get_session_dir_path(),
                                raylets={head[0]: _raylet_pid(cluster.head_node)}, cache=cache)
        try:
            for name, resources in rest:
                local.nodes[name] = cluster.add_node(num_cpus=cpus_per_node,
                                                     resources={**resources, f"mlh_{name}": 1.0}, **common)
                local.raylets[name] = _raylet_pid(local.nodes[name])
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
