"""``submission run --cluster``: the submission's LoadGen tests run on an executor's nodes, concurrently where
they are independent, while the tree stays the driver's.

Every benchmark × scenario's accuracy and performance runs are independent: they are all submitted as soon as
the command knows them. A scenario's audits need the user.conf its performance run was sized with, so they are
submitted together once that run is in place. The order in which results are placed (``steps._place``), the
failure handling (``steps._fail``), sizing and verification stay exactly as without ``--cluster``: each step
waits for its own run, which by then has usually finished on some node. Still one LoadGen test per process.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from itertools import count
from pathlib import Path
from typing import Any

from mlharness.cluster.executor import Executor
from mlharness.cluster.jobs import Constraints, RunOutcome, parse_constraints
from mlharness.cluster.shipping import job_from_argv
from mlharness.fileguard import open_regular
from mlharness.submission.layout import Tree, stamp, unique

__all__ = ["RemoteSteps", "parse_constraints"]  # parse_constraints: cluster.jobs's, read here before

MAX_IN_FLIGHT = 64  # submitted runs waiting on the executor at once (the cluster itself decides how many run)


class RemoteSteps:
    """The submission's child processes, run as jobs on ``executor`` and landed in the tree's work folder."""

    def __init__(self, executor: Executor, tree: Tree, constraints: Constraints | None = None,
                 share_host: bool = False):
        self.executor = executor
        self.constraints = constraints or Constraints()
        self.share_host = share_host  # the runs start without waiting for other runs on their node's host
        self.root = tree.archive / "dispatch"  # where runs land before a step takes them, out of the tree's way
        self.pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT, thread_name_prefix="submission-dispatch")
        self.futures: dict[tuple[str, ...], Future[RunOutcome]] = {}
        self.numbers = count()

    def submit(self, ids: tuple[str, str, str], step: str, argv: list[str]) -> Future[RunOutcome]:
        """Start the run (once per command line) and return its future outcome."""
        key = (*ids, step, *argv)
        if key not in self.futures:
            job = job_from_argv(argv, key="/".join((*ids, step)), dest="/".join((*ids, f"{step}-{next(self.numbers)}")),
                                constraints=self.constraints, meta={"step": step})
            job = replace(job, share_host=self.share_host)
            self.futures[key] = self.pool.submit(lambda: self.executor.run_all([job], self.root)[0])
        return self.futures[key]

    def child(self, ids: tuple[str, str, str], step: str) -> Callable[[list[str], Any], int]:
        """What ``steps.run_step`` calls instead of starting a local process: wait for the run, put its folder
        where the local child would have written it (``--output``) and return its exit status."""

        def run(argv: list[str], logf: Any) -> int:
            try:
                outcome = self.submit(ids, step, argv).result()
            except KeyboardInterrupt:
                self.executor.cancel()  # every run in flight stops within seconds
                raise
            node = outcome.node.short() if outcome.node else "no node"
            logf.write(f"ran on the {self.executor.name} executor, node {node} (attempts: {outcome.attempts})\n")
            out = Path(argv[argv.index("--output") + 1])
            console = outcome.folder / "console.log" if outcome.folder else None
            if console is not None and console.is_file():
                with open_regular(console, "console log of the remote run") as src:
                    shutil.copyfileobj(io.TextIOWrapper(src, encoding="utf-8", errors="replace"), logf)
            if outcome.ok and outcome.folder is not None:
                shutil.move(str(outcome.folder), str(out))
                return 0
            if outcome.folder is not None:  # the partial logs, where steps._fail collects a failed run's output
                shutil.move(str(outcome.folder), str(unique(out.parent / f"{step}.failed-{stamp()}")))
            logf.write(f"\nerror: {outcome.error or 'the run failed'}\n")
            return outcome.rc if outcome.rc not in (None, 0) else 3

        return run

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.executor.close()

