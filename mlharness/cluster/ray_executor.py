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
off so that mlharness knows which node failed. A result that comes back from a node Ray reports dead is never that
node's success: it is kept as a ``.failed-*`` folder and the job is run again (or fails naming the node); the task
itself ends with its run when its node's raylet dies (:mod:`mlharness.cluster.ray_tasks`). Nothing landed is ever
touched again. ``cancel()`` force-cancels every task in flight: its worker is killed, and the run's watcher kills
the run's processes within a second.

The head: a :class:`~mlharness.cluster.connect.HeadWatch` probes the head while work runs. Once it has not answered
for ``MLHARNESS_HEAD_LOST_AFTER`` seconds (10 by default), ``run_all`` stops waiting: every job not finished ends
``lost`` with the reason (the head at ADDR stopped answering), no Ray call that needs the head is made again (each
would wait 60 s, and then Ray aborts the driver), and the caller records what finished and what did not.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mlharness.cluster import landing
from mlharness.cluster.connect import HeadWatch, connect_timeout, head_lost_after, probe_grpc
from mlharness.cluster.facts import matching, no_node_error
from mlharness.cluster.jobs import Constraints, NodeInfo, RunJob, RunOutcome
from mlharness.cluster.local import skipped_or_refused
from mlharness.cluster.tarball import unpack
from mlharness.errors import MLHarnessError

log = logging.getLogger(__name__)

FACTS_TIMEOUT_S = 60.0
POLL_S = 0.25
NODE_ID_LABEL = "ray.io/node-id"
GET_TIMEOUT_S = 30.0  # ray.get of a result ray.wait found ready (it is on this machine already)
GCS_RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
GCS_RECONNECT_MARGIN_S = 15
SHUTDOWN_S = 8.0  # how long close() waits on Ray's shutdown once the head is lost (it gives up after 5 s)


class ClusterError(MLHarnessError):
    """The cluster cannot be used (Ray not installed, no cluster at the address)."""


class HeadLost(ClusterError):
    """The Ray head stopped answering; the message names its address."""


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
        lost_after = head_lost_after()  # a malformed MLHARNESS_HEAD_LOST_AFTER is refused before connecting
        if self._owns:
            if self.address == "auto":  # Ray's own "auto" would join any head on the host: head.py decides
                from mlharness.cluster.head import auto_address

                self.address = auto_address() or "local"
            seconds = connect_timeout()
            if self.address != "local":  # a listener that never answers: Ray would wait on it for ever
                what = "the Ray client server" if "://" in self.address else "the Ray cluster's GCS"
                probe_grpc(self.address.split("://", 1)[-1].split("/")[0], what, seconds,
                           "check the address, and that the cluster is up")
            if "://" in self.address:  # a Ray client retries a lost server for 30 s inside each call by default
                os.environ.setdefault("RAY_CLIENT_RECONNECT_GRACE_PERIOD", str(max(1, math.ceil(lost_after))))
            elif self.address != "local":  # the last resort should the driver be held past the head watch: Ray
                # aborts a driver whose GCS is gone this long (60 s by default); the watch acts well before
                os.environ.setdefault(GCS_RECONNECT_ENV, str(math.ceil(lost_after) + GCS_RECONNECT_MARGIN_S))
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
        self._head = self._watch_head(lost_after)

    def _watch_head(self, after: float) -> HeadWatch | None:
        """The watch of the head this driver is connected to: its client server (``ray://``) or its GCS. None for
        a Ray started inside this process ('local'): there is no head to lose."""
        if self.address == "local":
            return None
        target = self.address
        if "://" not in target:
            try:
                target = self.ray.get_runtime_context().gcs_address or target
            except Exception as e:  # noqa: BLE001 - a caller's own Ray connection that names no GCS
                log.debug("no GCS address from Ray: %s", e)
        try:
            return HeadWatch(target, after)
        except ValueError as e:
            log.warning("the Ray head is not watched (a lost head holds the driver until Ray gives up): %s", e)
            return None

    @property
    def lost(self) -> str | None:
        """Why the head is lost (naming its address), or None while it answers."""
        return self._head.reason if self._head is not None and self._head.lost.is_set() else None

    def _bounded(self, what: str, call: Callable[[], Any], seconds: float) -> Any:
        """``call()`` (a Ray call that needs the head) on a thread of its own: its result, or :class:`HeadLost`
        as soon as the head is lost, or ClusterError after ``seconds``. A lost GCS holds such a call 60 s."""
        if self.lost:
            raise HeadLost(self.lost)
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = call()
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=run, name=f"mlharness-ray-{what}", daemon=True).start()
        deadline = time.monotonic() + seconds
        while not done.wait(POLL_S):
            if self.lost:
                raise HeadLost(self.lost)
            if time.monotonic() > deadline:
                raise ClusterError(f"Ray did not answer {what} within {seconds:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    # -- nodes -------------------------------------------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        """Every node Ray knows, alive or not; facts measured on each live node once (cached)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        raw = self._bounded("the list of nodes", self.ray.nodes, FACTS_TIMEOUT_S)
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
            try:
                nodes = [] if self._cancelled.is_set() else self.nodes()
            except HeadLost as e:
                finish(i, self._lost_outcome(job, attempt - 1, None, str(e)))
                return
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
            if self.lost:  # nothing more comes back through a lost head: every job in flight ends lost
                self._give_up(pending, jobs, finish)
                break
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
                    got = self.ray.get(ref, timeout=GET_TIMEOUT_S)
                except Exception as e:  # noqa: BLE001 - the task never returned: cancelled, or its node died
                    retry = self._failure(job, e, candidates, attempt)
                    if isinstance(retry, RunOutcome):
                        finish(i, retry)
                    else:
                        start(i, attempt + 1, retry)
                    continue
                try:
                    outcome = self._land(job, got, results_root, attempt, t0)
                except HeadLost as e:  # whose node it was cannot be asked: not recorded as anyone's success
                    finish(i, self._lost_outcome(job, attempt, None, str(e)))
                    continue
                if outcome.node is not None and not outcome.node.alive and attempt <= self.retries:
                    log.warning("%s: %s; running it again elsewhere", job.key, outcome.error)
                    start(i, attempt + 1, outcome.error)
                else:
                    finish(i, outcome)
        return [outcomes[i] for i in range(len(jobs))]

    def _lost_outcome(self, job: RunJob, attempts: int, node: NodeInfo | None, reason: str | None = None,
                      t0: float | None = None) -> RunOutcome:
        why = reason or self.lost or "the Ray head stopped answering"
        return RunOutcome(job, False, None, node, None, f"not finished: {why}", attempts=attempts, started_unix=t0,
                          lost=True)

    def _give_up(self, pending: dict[Any, tuple[int, int, list[NodeInfo], float]], jobs: list[RunJob],
                 finish: Callable[[int, RunOutcome], None]) -> None:
        """The head is lost: every job in flight ends ``lost``. Each task is force-cancelled on its way out, in
        the background and bounded: a worker reached without the head stops its run at once; the others end
        with their raylets (Ray stops a raylet that lost its GCS), and each run with its task."""
        refs = list(pending)
        log.warning("%s: %d run(s) in flight are given up", self.lost, len(refs))
        threading.Thread(target=self._cancel_refs, args=(refs,), name="mlharness-cancel-lost", daemon=True).start()
        for ref in refs:
            i, attempt, _candidates, t0 = pending.pop(ref)
            with self._lock:
                self._inflight.pop(ref, None)
            finish(i, self._lost_outcome(jobs[i], attempt, None, t0=t0))

    def _failure(self, job: RunJob, e: Exception, candidates: list[NodeInfo], attempt: int) -> RunOutcome | str:
        """The outcome of a task that raised (cancelled: failed), or the error to rerun it with (a node died)."""
        exc = self.ray.exceptions
        if isinstance(e, exc.TaskCancelledError) or self._cancelled.is_set():
            return RunOutcome(job, False, None, None, None, "cancelled: the driver stopped it", attempts=attempt,
                              cancelled=True)
        try:
            alive = {n.node_id for n in self.nodes() if n.alive}
        except HeadLost as lost:  # a head lost under the run: which node failed cannot be known any more
            return self._lost_outcome(job, attempt, None, str(lost))
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
        if not node.alive:  # a run that ended as its node died: kept, never that node's success
            ok = False
            error = (f"{error}; " if error else "") + "the node is gone (Ray reports it dead), so what it sent back " \
                "is kept as a failed run, not recorded as its result"
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
        if self.lost:  # each cancel may wait on the lost head: in the background, the caller goes on
            threading.Thread(target=self._cancel_refs, args=(refs,), name="mlharness-cancel", daemon=True).start()
        else:
            self._cancel_refs(refs)

    def close(self) -> None:
        if self._head is not None:
            self._head.stop()
        if not (self._owns and self.ray.is_initialized()):
            return
        if not self.lost:
            self.ray.shutdown()
            return
        # Ray's shutdown tells the lost GCS goodbye and may wait on it: bounded, so the driver ends all the same
        done = threading.Thread(target=self.ray.shutdown, name="mlharness-ray-shutdown", daemon=True)
        done.start()
        done.join(SHUTDOWN_S)
        if done.is_alive():
            log.warning("Ray's shutdown did not end within %g s of the head being lost; leaving it", SHUTDOWN_S)
