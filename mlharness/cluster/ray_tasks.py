"""What runs on a Ray node: a job's ``mlharness`` process (the same child the local backend starts,
:mod:`mlharness.cluster.child`) in a temporary folder, its run folder returned as bytes; and the node's facts.

These are plain functions; :mod:`mlharness.cluster.ray_executor` wraps them with ``ray.remote``. Every node needs
the same mlharness installed (built-in manifests are named, not shipped). A task killed by ``ray.cancel(force=True)``
or by its node going down takes its run with it: the child's watcher kills the run's process group once the
worker that started it is gone.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from mlharness.cluster.child import CONSOLE, ChildRun
from mlharness.cluster.facts import node_facts
from mlharness.cluster.jobs import NodeInfo, RunJob
from mlharness.cluster.local import executor_env
from mlharness.cluster.tarball import pack, pack_bounded


def this_node() -> NodeInfo:
    import ray

    return NodeInfo(node_id=ray.get_runtime_context().get_node_id(), address=ray.util.get_node_ip_address())


def facts_task() -> dict[str, Any]:
    """The node's id and facts (a task pinned to each node calls this once; the driver caches it)."""
    node = this_node()
    return {"node_id": node.node_id, "address": node.address, "facts": node_facts()}


def run_task(job: RunJob, ship_limit: int | None = None) -> dict[str, Any]:
    """Run ``job`` here; its folder packed (a good run's, or a failed run's partial output with its console),
    rc, the error and this node."""
    node = this_node()
    work = Path(tempfile.mkdtemp(prefix="mlharness-job-"))
    keep = False
    try:
        result = ChildRun(job, work, executor_env("ray", node)).run()
        ok = result.rc == 0 and result.folder is not None and result.folder.name == "run"
        folder = result.folder
        if not ok:
            if folder is None:  # refused before it wrote anything: its console is the whole record
                folder = work / "failed-run"
                folder.mkdir(exist_ok=True)
            shutil.copy2(result.console, folder / CONSOLE)
        data, why = pack_bounded(folder, node.short(), ship_limit)
        error = result.error if not ok else None
        if why:
            keep, ok = True, False
            error = f"{error}; {why}" if error else why
        return {"ok": ok, "rc": result.rc, "error": error, "tar": data, "node_id": node.node_id,
                "address": node.address, "seconds": result.seconds}
    except Exception as e:  # noqa: BLE001 - the driver reports it naming the node; the console comes back
        console = work / CONSOLE
        if console.exists():
            folder = work / "failed-console"
            folder.mkdir(exist_ok=True)
            shutil.copy2(console, folder / CONSOLE)
            data = pack(folder)
        else:
            data = None
        return {"ok": False, "rc": None, "error": f"{type(e).__name__}: {e}", "tar": data,
                "node_id": node.node_id, "address": node.address, "seconds": None}
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
