"""The ``ray`` backend: each job a Ray task on a node that has what it needs; Ray places the work and queues what
does not fit yet, mlharness never schedules it itself.

Placement: a job's CPUs and accelerator are Ray resources (``num_cpus``, ``resources={accelerator: n}``); what
Ray's resources cannot say (memory, framework versions, labels, "this node") is checked against each node's facts
(:mod:`mlharness.cluster.facts`) and handed to Ray as a label selector on the matching nodes' ids, so Ray only
places the task among them. The task runs the job's ``mlharness`` process on its node in a temporary folder and
returns the run folder as bytes (:mod:`mlharness.cluster.tarball`); the driver lands it in the results tree
(:mod:`mlharness.cluster.landing`).

Faults: a node that dies under a job (Ray raises ``NodeDiedError``, ``WorkerCrashedError``, ...) has the job run
again elsewhere, up to ``retries`` times; past that the outcome is failed, naming the node. Ray's own retries are
off so that mlharness knows which node failed. Nothing landed is ever touched again. ``cancel()`` force-cancels
every task in flight: its worker is killed, and the run's watcher kills the run's processes within a second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mlharness.cluster import landing
from mlharness.cluster.connect import connect_timeout, probe_grpc
from mlharness.cluster.facts import matching, no_node_error
from mlharness.cluster.jobs import Constraints, NodeInfo, RunJob, RunOutcome
from mlharness.cluster.local import skipped_or_refused
from mlharness.cluster.tarball import unpack
from mlharness.errors import MLHarnessError

log = logging.getLogger(__name__)

FACTS_TIMEOUT_S = 60.0
POLL_S = 0.25
NODE_ID_LABEL = "ray.io/node-id"


class ClusterError(MLHarnessError):
    """The cluster cannot be used (Ray not installed, no cluster at the address)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ClusterError("--cluster needs Ray, which is not installed: pip install 'mlharness[cluster]'") from e
    return ray


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None, retries: int = 1, skip_existing: bool = False,
                 ship_limit: int | None = None):
        ray = import_ray()
        self.ray, self.address = ray, address or "auto"
        self.retries = retries  # how many times a job whose node died is run again elsewhere
        self.skip_existing = skip_existing  # a job whose folder exists: skipped (--resume) instead of refused
        self.ship_limit = ship_limit  # bytes; None: MLHARNESS_CLUSTER_SHIP_MB (mlharness/cluster/tarball.py)
        self._owns = not ray.is_initialized()
        if self._owns:
            if self.address == "auto":  # Ray's own "auto" would join any head on the host: head.py decides
                from mlharness.cluster.head import auto_address

                self.address = auto_address() or "local"
            seconds = connect_timeout()
            if self.address != "local":  # a listener that never answers: Ray would wait on it for ever
                what = "the Ray client server" if "://" in self.address else "the Ray cluster's GCS"
                probe_grpc(self.address.split("://", 1)[-1].split("/")[0], what, seconds,
                           "check the address, and that the cluster is up")
            try:
                ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False,
                         **({"include_dashboard": False} if self.address == "local" else {}))
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise ClusterError(f"no Ray cluster at {self.address}: {e} (start one with `ray start --head`, "
                                   "or name it with --cluster ray://HOST:PORT)") from e
        from mlharness.cluster import ray_tasks

        self._run_task = ray.remote(max_retries=0, retry_exceptions=False)(ray_tasks.run_task)
        self._facts_task = ray.remote(num_cpus=0, max_retries=0)(ray_tasks.facts_task)
        self._facts: dict[str, dict[str, Any]] = {}
        self._inflight: dict[Any, RunJob] = {}
        self._lock = threading.Lock()
        self._cancelled = threading.Event()

    # -- nodes -------------------------------------------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        """Every node Ray knows, alive or not; facts measured on each live node once (cached)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        raw = self.ray.nodes()
        missing = [n["NodeID"] for n in raw if n["Alive"] and n["NodeID"] not in self._facts]
        refs = {nid: self._facts_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False))
                .remote() for nid in missing}
        deadline = time.monotonic() + FACTS_TIMEOUT_S
        for nid, ref in refs.items():
            try:
                got = self.ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                self._facts[nid] = got["facts"]
            except Exception as e:  # noqa: BLE001 - a node that cannot say its facts is listed with the reason
                log.warning("node %s did not report its facts: %s", nid[:12], e)
                self._facts[nid] = {"error": f"{type(e).__name__}: {e}"}
        out = []
        for n in raw:
            resources = {k: float(v) for k, v in n.get("Resources", {}).items() if not k.startswith("node:")}
            labels = {k: str(v) for k, v in (n.get("Labels") or {}).items() if k != NODE_ID_LABEL}
            out.append(NodeInfo(node_id=n["NodeID"], address=n["NodeManagerAddress"], resources=resources,
                                labels=labels, facts=self._facts.get(n["NodeID"], {}), alive=bool(n["Alive"])))
        return out

    def matching(self, constraints: Constraints) -> list[NodeInfo]:
        return matching(self.nodes(), constraints)

    def _node(self, node_id: str, address: str | None = None) -> NodeInfo:
        for node in self.nodes():
            if node.node_id == node_id:
                return node
        return NodeInfo(node_id=node_id, address=address or "?", alive=False)

    # -- runs --------------------------------------------------------------------------------------------------
    def _submit(self, job: RunJob, candidates: list[NodeInfo]) -> Any:
        c = job.constraints
        options: dict[str, Any] = {"num_cpus": c.cpus,
                                   "label_selector": {NODE_ID_LABEL: f"in({','.join(n.node_id for n in candidates)})"}}
        if c.accelerator:
            options["resources"] = {c.accelerator: c.accelerators}
        ref = self._run_task.options(**options).remote(job, self.ship_limit)
        with self._lock:
            self._inflight[ref] = job
        return ref

    def run_all(self, jobs: Iterable[RunJob], results_root: Path,
                on_done: Callable[[RunOutcome], None] | None = None) -> list[RunOutcome]:
        results_root = Path(results_root)
        results_root.mkdir(parents=True, exist_ok=True)
        jobs = list(jobs)
        outcomes: dict[int, RunOutcome] = {}
        pending: dict[Any, tuple[int, int, list[NodeInfo], float]] = {}  # ref -> (index, attempt, candidates, t0)

        def finish(i: int, outcome: RunOutcome) -> None:
            outcomes[i] = outcome
            if on_done is not None:
                on_done(outcome)

        def start(i: int, attempt: int, error: str | None = None) -> None:
            job = jobs[i]
            nodes = self.nodes()
            candidates = matching(nodes, job.constraints)
            if self._cancelled.is_set():
                finish(i, RunOutcome(job, False, None, None, None, error or "cancelled before it started",
                                     attempts=attempt - 1, cancelled=True))
            elif not candidates:
                reason = no_node_error(nodes, job.constraints)
                finish(i, RunOutcome(job, False, None, None, None, f"{error}; {reason}" if error else reason,
                                     attempts=attempt - 1))
            else:
                pending[self._submit(job, candidates)] = (i, attempt, candidates, time.time())

        for i, job in enumerate(jobs):
            try:
                final = landing.destination(results_root, job.dest)
            except ValueError as e:
                finish(i, RunOutcome(job, False, None, None, None, str(e), attempts=0))
                continue
            early = skipped_or_refused(job, final, self.skip_existing)
            if early is not None:
                finish(i, early)
            else:
                start(i, 1)
        cancelled = False
        while pending:
            if self._cancelled.is_set() and not cancelled:
                cancelled = True  # cancel() may have raced a submission: every ref still pending goes
                self._cancel_refs(list(pending))
            ready, _ = self.ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                i, attempt, candidates, t0 = pending.pop(ref)
                with self._lock:
                    self._inflight.pop(ref, None)
                job = jobs[i]
                try:
                    got = self.ray.get(ref)
                except Exception as e:  # noqa: BLE001 - the task never returned: cancelled, or its node died
                    retry = self._failure(job, e, candidates, attempt)
                    if isinstance(retry, RunOutcome):
                        finish(i, retry)
                    else:
                        start(i, attempt + 1, retry)
                    continue
                finish(i, self._land(job, got, results_root, attempt, t0))
        return [outcomes[i] for i in range(len(jobs))]

    def _failure(self, job: RunJob, e: Exception, candidates: list[NodeInfo], attempt: int) -> RunOutcome | str:
        """The outcome of a task that raised (cancelled: failed), or the error to rerun it with (a node died)."""
        exc = self.ray.exceptions
        if isinstance(e, exc.TaskCancelledError) or self._cancelled.is_set():
            return RunOutcome(job, False, None, None, None, "cancelled: the driver stopped it", attempts=attempt,
                              cancelled=True)
        alive = {n.node_id for n in self.nodes() if n.alive}
        dead = [n for n in candidates if n.node_id not in alive]
        where = ", ".join(f"node {n.short()}" for n in dead) or "its node"
        error = f"{where} failed under the run ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        lost = isinstance(e, exc.NodeDiedError | exc.WorkerCrashedError | exc.ObjectLostError
                          | exc.RaySystemError | exc.LocalRayletDiedError) or bool(dead)
        if lost and attempt <= self.retries:
            log.warning("%s: %s; running it again elsewhere", job.key, error)
            return error
        node = dead[0] if len(dead) == 1 else None
        return RunOutcome(job, False, None, node, None, error, attempts=attempt)

    def _land(self, job: RunJob, got: dict[str, Any], results_root: Path, attempt: int, t0: float) -> RunOutcome:
        node = self._node(got["node_id"], got["address"])
        final = landing.destination(results_root, job.dest)
        ok, error, folder = bool(got["ok"]), got["error"], None
        if got.get("tar") is not None:
            staged = landing.staging_dir(final)
            try:
                unpack(got["tar"], staged)
                folder = landing.land_staged(staged, final, failed=not ok)
            except (landing.LandingError, OSError, ValueError) as e:
                ok, error = False, str(e)
        if error:
            error = f"on node {node.short()}: {error}"
        return RunOutcome(job, ok and error is None, got["rc"], node, folder, error, attempts=attempt,
                          started_unix=t0, finished_unix=time.time())

    def _cancel_refs(self, refs: list[Any]) -> None:
        for ref in refs:
            try:
                self.ray.cancel(ref, force=True)
            except Exception as e:  # noqa: BLE001 - already finished, or its node is gone
                log.debug("cancel: %s", e)

    def cancel(self) -> None:
        """Force-cancel every task in flight (their runs are killed with their workers) and start no other."""
        self._cancelled.set()
        with self._lock:
            refs = list(self._inflight)
        self._cancel_refs(refs)

    def close(self) -> None:
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
