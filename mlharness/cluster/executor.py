"""The interface of every backend. Callers (``submission run``, ``sweep``, ``campaign``) hold an :class:`Executor`
and never know which backend it is, so a Kubernetes Jobs backend can be added without touching them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from mlharness.cluster.jobs import Constraints, NodeInfo, RunJob, RunOutcome


class Executor(Protocol):
    name: str  # "local", "ray"

    def nodes(self) -> list[NodeInfo]:
        """Every node with its resources, labels and host facts (measured on the node)."""
        ...

    def matching(self, constraints: Constraints) -> list[NodeInfo]:
        """The live nodes that meet ``constraints``."""
        ...

    def run_all(self, jobs: Iterable[RunJob], results_root: Path,
                on_done: Callable[[RunOutcome], None] | None = None) -> list[RunOutcome]:
        """Run every job (concurrently where the nodes allow), each on a node meeting its constraints; land each
        run folder at ``results_root / job.dest`` (a failed run's partial logs at a ``.failed-*`` sibling, never
        over an earlier good result); call ``on_done`` as each ends; return the outcomes in the jobs' order. A job
        whose node dies is run again elsewhere (up to the backend's retry count) or reported failed naming the
        node. Raises nothing for a failed run: the outcome says so."""
        ...

    def cancel(self) -> None:
        """Stop every run in flight within seconds (SIGINT/SIGTERM of the driver calls it)."""
        ...

    def close(self) -> None:
        ...


def make_executor(cluster: str | None) -> Executor:
    """``None`` or ``"local"``: this machine. ``"ray://HOST:PORT"`` (or a GCS ``HOST:PORT``): that Ray cluster (the
    ``cluster`` extra; without Ray installed the error says how to install it). ``"auto"``: the cluster
    ``RAY_ADDRESS`` names, or the one ``mlharness cluster start`` recorded for this user, never another job's head
    (:mod:`mlharness.cluster.head`); with neither, this machine (saying so)."""
    if cluster == "auto":
        from mlharness.cluster.head import auto_address
        from mlharness.cluster.ray_executor import import_ray

        import_ray()  # 'auto' names a Ray cluster: without Ray the error says how to install it

        cluster = None if _ray_initialized() else auto_address()
        if cluster is None and _ray_initialized():
            cluster = "auto"  # this process joined a cluster already: its executor uses that one
    if cluster in (None, "local"):
        from mlharness.cluster.local import LocalExecutor

        return LocalExecutor()
    from mlharness.cluster.ray_executor import RayExecutor

    return RayExecutor(cluster)


def _ray_initialized() -> bool:
    """This process holds a Ray connection already (it chose its cluster itself)."""
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()
