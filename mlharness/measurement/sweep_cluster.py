"""``mlharness sweep --cluster``: a sweep's points as run jobs on an executor's nodes, all started at once.

Only a plan whose values are known before anything runs can be spread: an explicit list (``--qps 1,2,4``,
``--concurrency 1,2,4``) or the ``even`` and ``log2`` plans over ``--min-*``/``--max-*``. The adaptive plan
chooses each value from the points before it (doubling until the knee, then bisecting), and a sweep without a
range starts from the rate its first run calibrates, so it is refused with ``--cluster``.

Each point is one ``mlharness run`` (one LoadGen test per process, LoadGen's per-sample trace on, for goodput)
placed on a node that meets ``--constraints``; its folder lands where the local sweep writes it
(``DIR/points/<label>``), and its record in ``sweep.json`` is made by the same code as a local point's
(:meth:`Sweep.point`), plus the node that ran it. The knee, the highest VALID value and the report are computed
from the points exactly as for a local sweep. Points on different machines measure different machines: give
constraints that only identical nodes meet.

A remote model shared by every point (``--endpoint``, ``--agent``, ``--replay``) is refused: points measured at
once would load the one server together, and each point's figures would include the others' load.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from mlharness.cluster.executor import Executor, make_executor
from mlharness.cluster.jobs import Constraints, RunJob, RunOutcome, parse_constraints
from mlharness.cluster.shipping import job_from_argv
from mlharness.cluster.signals import cancel_on_signals
from mlharness.errors import MLHarnessError, SettingsError
from mlharness.loadgen.logs import parse_summary
from mlharness.measurement import sweep_plan as sp
from mlharness.measurement.sweep import Sweep, SweepConfig

SHARED = "points measured at once would all load that one server, and each point's figures would include the " \
         "others' load: sweep it without --cluster"
FLAG_FIELDS = ("framework", "dataset", "device", "round", "user_conf", "server_max_wait_ms", "threads", "workers",
               "instances", "threads_per_instance", "load_workers", "trace", "telemetry_interval_ms")


def refuse_shared_remote(args: Any) -> None:
    """``--cluster`` with a model every point would share, or ``--constraints`` without a cluster: refused."""
    if getattr(args, "constraints", None) and not getattr(args, "cluster", None):
        raise SettingsError("--constraints picks nodes of a cluster: give --cluster too")
    if not getattr(args, "cluster", None):
        return
    if getattr(args, "trace_file", None) is not None or getattr(args, "session_rate", None) is not None:
        raise SettingsError(f"--cluster with --replay: every point replays the trace at the same --endpoint; {SHARED}")
    if getattr(args, "endpoint", None):
        raise SettingsError(f"--cluster with --endpoint: every point measures the same endpoint; {SHARED}")
    if getattr(args, "agent", None) or getattr(args, "sut_server", None) or getattr(args, "network", None):
        raise SettingsError(f"--cluster with --agent/--network: every point measures the same agents; {SHARED}")


class ClusterSweep(Sweep):
    """A sweep whose points are run jobs on an executor; :meth:`run_on` measures what is missing."""

    def __init__(self, cfg: SweepConfig, cluster: str, constraints: Constraints, share_host: bool = False):
        self.cluster, self.constraints = cluster, constraints
        self.share_host = share_host  # --share-host: points start without waiting for other runs on their host
        self.executor: Executor | None = None
        self.failed: list[RunOutcome] = []
        super().__init__(cfg)

    def _open(self) -> dict[str, Any]:
        if self.plan == "adaptive":
            raise SettingsError("--cluster spreads a sweep whose values are known before it starts: --qps or "
                                "--concurrency lists, or --plan even|log2 with --min-*/--max-*; the adaptive plan "
                                "chooses each value from the points measured before it (doubling to the knee, then "
                                "bisecting; without a range, starting from the first run's calibrated rate), so "
                                "its points cannot run at once")
        self.executor = make_executor(self.cluster)  # the options are checked; nothing is written yet
        try:
            return super()._open()
        except BaseException:
            self.executor.close()
            raise

    def values(self) -> list[float]:
        c = self.cfg
        return list(c.concurrency or c.qps) if self.plan == "list" else sp.planned(
            self.plan, self.lo, self.hi, c.points, self.integer)

    def job(self, value: float, repeat: int) -> RunJob:
        """The point as the ``mlharness run`` command line the local sweep's run amounts to."""
        c = self.cfg
        overrides, batch = self._overrides(value)
        dataset_path = c.dataset_path and str(Path(c.dataset_path).expanduser().absolute())
        argv = ["run", "--manifest", str(c.manifest), "--scenario", c.scenario, "--mode", "performance",
                "--no-progress", "--loadgen-trace"]
        for name, given in (("dataset_path", dataset_path), ("count", c.count), ("max_batchsize", batch),
                            ("audit_config", self._token_log()), *overrides.given().items(),
                            *((k, c.run.get(k)) for k in FLAG_FIELDS)):
            if given is not None:
                argv += ["--" + name.replace("_", "-"), str(given)]
        argv += [flag for flag, on in (("--pin-cores", c.run.get("pin_cores")), ("--ignore-framework-version",
                 c.run.get("ignore_framework_version")), ("--no-calibrate", c.run.get("calibrate") is False)) if on]
        label = self.label(value, repeat)
        job = job_from_argv(argv, key=label, dest=f"points/{label}", constraints=self.constraints,
                            meta={"value": value, "repeat": repeat})
        return replace(job, share_host=self.share_host)

    def run_on(self, executor: Executor) -> dict[str, Any]:
        state = self.state
        done = {(p["value"], p["repeat"]) for p in state["points"]}
        todo = [(v, r) for v in self.values() for r in range(1, self.cfg.repeats + 1) if (v, r) not in done]
        for v, r in todo:
            self._clear(self.cfg.output / "points" / self.label(v, r))
        jobs = [self.job(v, r) for v, r in todo]
        nodes = executor.matching(self.constraints)
        self._say(f"{len(jobs)} point(s) on the {executor.name} executor, {len(nodes)} matching node(s) "
                  f"({self.constraints.describe()})" + (f"; {len(done)} measured before" if done else ""))
        executor.run_all(jobs, self.cfg.output, self._landed)
        self._refresh(state)
        state["complete"] = not self.failed
        self._write(state)
        return state

    def _landed(self, outcome: RunOutcome) -> None:
        """One point has ended on its node: its record is added and sweep.json rewritten, as a local point's."""
        job = outcome.job
        node = outcome.node.short() if outcome.node else "no node"
        if outcome.ok and outcome.folder is not None:
            try:
                summary = parse_summary(outcome.folder / "mlperf_log_summary.txt", self.cfg.scenario)
                point = self.point(job.key, job.meta["value"], job.meta["repeat"], outcome.folder, summary)
            except MLHarnessError as e:
                outcome.ok, outcome.error = False, f"on node {node}: {e}"
        if not outcome.ok or outcome.folder is None:
            self.failed.append(outcome)
            self._say(f"{job.key}: failed on {node}: {outcome.error}")
            return
        point["node"] = {"node_id": outcome.node.node_id, "address": outcome.node.address} if outcome.node else None
        self._say(f"{job.key}: measured on node {node}")
        self.state["points"].append(point)
        self._refresh(self.state)
        self._write(self.state)
        if self.cfg.on_point:
            self.cfg.on_point(point)


def sweep_on_cluster(cfg: SweepConfig, cluster: str, constraints: str | None,
                     share_host: bool = False) -> tuple[dict[str, Any], list[RunOutcome]]:
    """The sweep measured on ``cluster``'s nodes; its state and the points that failed (their folders kept as
    ``.failed-*``; ``--resume`` measures them again). SIGINT/SIGTERM stop every point in flight (exit 130/143);
    the points that finished are in sweep.json."""
    sweep = ClusterSweep(cfg, cluster, parse_constraints(constraints), share_host)
    assert sweep.executor is not None
    try:
        with cancel_on_signals(sweep.executor):
            state = sweep.run_on(sweep.executor)
    finally:
        sweep.executor.close()
    return state, sweep.failed
