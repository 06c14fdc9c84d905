"""What runs on a Ray node: a job's ``mlharness`` process (the same child the local backend starts,
:mod:`mlharness.cluster.child`) in a temporary folder, its run folder returned as bytes; and the node's facts.

These are plain functions; :mod:`mlharness.cluster.ray_executor` wraps them with ``ray.remote``. Every node needs
the same mlharness installed (built-in manifests are named, not shipped). A task killed by ``ray.cancel(force=True)``
or by its node going down takes its run with it: the child's watcher kills the run's process group once the
worker that started it is gone.

A worker outlives its raylet when the raylet is killed under a task (Ray's worker notices only on its next call
to the raylet, and a worker of a raylet that lost its GCS waits on the GCS): so the task watches its raylet, and
once it is gone kills the run, removes its folder and ends the worker. A task of a dead node therefore never sends
a result back, and no worker or run of a dead node stays behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
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


RAYLET_POLL_S = 0.2


def raylet_pid() -> int:
    """This worker's raylet: ``RAY_RAYLET_PID`` (Ray sets it in every worker's environment), else its parent."""
    try:
        return int(os.environ.get("RAY_RAYLET_PID", ""))
    except ValueError:
        return os.getppid()


def raylet_gone(raylet: int, parent: int) -> bool:
    """The raylet ``raylet`` has died. When it is this worker's parent (``parent``, as the task started), the
    worker is handed to another parent at once; a dead raylet may stay a zombie a while, so its pid still
    answering proves nothing. Otherwise its pid is looked at, a zombie counting as dead."""
    if raylet == parent:
        return os.getppid() != parent
    try:
        os.kill(raylet, 0)
    except ProcessLookupError:
        return True
    except OSError:  # someone else's process: alive
        return False
    try:
        return Path(f"/proc/{raylet}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):  # no /proc (macOS): the pid answered
        return False


def watch_raylet(run: ChildRun, work: Path, done: threading.Event, raylet: int, parent: int) -> None:
    """Until ``done``: once this worker's raylet is gone, kill the run, remove its folder and end the worker,
    so that nothing of the run comes back from a dead node and nothing of it stays on the node."""
    while not done.wait(RAYLET_POLL_S):
        if raylet_gone(raylet, parent):
            run.kill()
            shutil.rmtree(work, ignore_errors=True)
            os._exit(1)


def run_task(job: RunJob, ship_limit: int | None = None) -> dict[str, Any]:
    """Run ``job`` here; its folder packed (a good run's, or a failed run's partial output with its console),
    rc, the error and this node. The worker ends with no result if its raylet dies first (:func:`watch_raylet`)."""
    node = this_node()
    work = Path(tempfile.mkdtemp(prefix="mlharness-job-"))
    keep = False
    run = ChildRun(job, work, executor_env("ray", node))
    done = threading.Event()
    threading.Thread(target=watch_raylet, args=(run, work, done, raylet_pid(), os.getppid()),
                     name="mlharness-raylet-watch", daemon=True).start()
    try:
        result = run.run()
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
        done.set()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
