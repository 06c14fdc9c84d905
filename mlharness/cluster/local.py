"""The ``local`` backend: today's behaviour, on this machine. Jobs run one after another (one LoadGen test at a
time on one machine is the rule: two at once would measure each other), each as its own ``mlharness`` process
(:mod:`mlharness.cluster.child`), and each run folder is landed in the results tree as the Ray backend lands
the folders it gathers (:mod:`mlharness.cluster.landing`), so callers see the same tree whichever backend ran it.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from mlharness.cluster import landing
from mlharness.cluster.child import CONSOLE, ChildResult, ChildRun
from mlharness.cluster.facts import matching, mismatch, no_node_error, node_facts
from mlharness.cluster.jobs import Constraints, NodeInfo, RunJob, RunOutcome


def executor_env(backend: str, node: NodeInfo) -> dict[str, str]:
    """What a run's process is told about where it runs; ``mlharness/run/metadata.py`` records it."""
    return {"MLHARNESS_EXECUTOR": backend, "MLHARNESS_NODE_ID": node.node_id,
            "MLHARNESS_NODE_ADDRESS": node.address}


def skipped_or_refused(job: RunJob, final: Path, skip_existing: bool) -> RunOutcome | None:
    """The outcome of a job whose destination exists before it starts (skipped, or refused naming it)."""
    if not final.exists():
        return None
    if skip_existing:
        return RunOutcome(job, ok=True, rc=None, node=None, folder=final, attempts=0, skipped=True)
    return RunOutcome(job, ok=False, rc=None, node=None, folder=None, error=landing.exists_error(final),
                      attempts=0)


def land_result(job: RunJob, result: ChildResult, final: Path, node: NodeInfo) -> tuple[Path | None, str | None]:
    """Land a finished child's folder (a good run at ``final``, a failed one as ``.failed-*`` with its console);
    the landed folder and the error naming the node, if any."""
    ok = result.rc == 0 and result.folder is not None and result.folder.name == "run"
    error = None if ok else f"on node {node.short()}: {result.error or 'the run wrote no folder'}"
    source = result.folder
    if not ok:
        if source is None:  # refused before it wrote anything: its console is the whole record
            source = result.console.parent / "failed-run"
            source.mkdir(exist_ok=True)
        shutil.copy2(result.console, source / CONSOLE)
    try:
        return landing.land_folder(source, final, failed=not ok), error
    except (landing.LandingError, OSError) as e:
        return None, f"on node {node.short()}: {e}"


class LocalExecutor:
    name = "local"

    def __init__(self, skip_existing: bool = False, python: str = sys.executable):
        self.skip_existing = skip_existing  # a job whose folder exists: skipped (--resume) instead of refused
        self.python = python
        self._node: NodeInfo | None = None
        self._cancelled = threading.Event()
        self._current: ChildRun | None = None

    def nodes(self) -> list[NodeInfo]:
        if self._node is None:
            facts = node_facts()
            resources: dict[str, float] = {"CPU": float(os.cpu_count() or 1)}
            if facts.get("memory_bytes"):
                resources["memory"] = float(facts["memory_bytes"])
            gpus = (facts.get("accelerators") or {}).get("count") or 0
            if gpus:
                resources["GPU"] = float(gpus)
            self._node = NodeInfo(node_id=f"local:{socket.gethostname()}", address="localhost",
                                  resources=resources, facts=facts)
        return [self._node]

    def matching(self, constraints: Constraints) -> list[NodeInfo]:
        return matching(self.nodes(), constraints)

    def run_all(self, jobs: Iterable[RunJob], results_root: Path,
                on_done: Callable[[RunOutcome], None] | None = None) -> list[RunOutcome]:
        results_root = Path(results_root)
        results_root.mkdir(parents=True, exist_ok=True)
        outcomes = []
        for job in jobs:
            outcome = self._one(job, results_root)
            outcomes.append(outcome)
            if on_done is not None:
                on_done(outcome)
        return outcomes

    def _one(self, job: RunJob, results_root: Path) -> RunOutcome:
        try:
            final = landing.destination(results_root, job.dest)
        except ValueError as e:
            return RunOutcome(job, ok=False, rc=None, node=None, folder=None, error=str(e), attempts=0)
        early = skipped_or_refused(job, final, self.skip_existing)
        if early is not None:
            return early
        node = self.nodes()[0]
        if self._cancelled.is_set():
            return RunOutcome(job, ok=False, rc=None, node=None, folder=None, error="cancelled before it started",
                              attempts=0, cancelled=True)
        if mismatch(node, job.constraints) is not None:
            return RunOutcome(job, ok=False, rc=None, node=None, folder=None,
                              error=no_node_error([node], job.constraints), attempts=0)
        started = time.time()
        work = Path(tempfile.mkdtemp(prefix=".mlharness-job-", dir=results_root))
        try:
            child = ChildRun(job, work, executor_env(self.name, node), python=self.python)
            self._current = child
            if self._cancelled.is_set():  # cancel() between the check above and here
                child.stop()
            result = child.run()
            folder, error = land_result(job, result, final, node)
        finally:
            self._current = None
            shutil.rmtree(work, ignore_errors=True)
        return RunOutcome(job, ok=error is None, rc=result.rc, node=node, folder=folder, error=error,
                          started_unix=started, finished_unix=time.time(),
                          cancelled=error is not None and result.stopped and self._cancelled.is_set())

    def cancel(self) -> None:
        """Stop the run in progress (SIGINT, then SIGKILL: :mod:`mlharness.cluster.child`) and start no other."""
        self._cancelled.set()
        current = self._current
        if current is not None:
            current.stop()

    def close(self) -> None:
        self.cancel()
