"""One run: manifest → predictor instances → QSL → SUT for the scenario → LoadGen → accuracy → run directory.

:func:`run` is the whole run as its steps; what each step needs lives in a module named for it: the plan of the
run (:mod:`.plan`: every later step takes the plan's parts, never the options), the predictor factory
(:mod:`.factory`), what the model's data kind asks of the run (:mod:`mlharness.kinds`: its SUT, Server bound and
calibration) and the run metadata (:mod:`.metadata`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlharness.calibration import second_try
from mlharness.errors import HookError, MLHarnessError, RunFailed, SettingsError
from mlharness.kinds.base import Parts
from mlharness.loadgen.batch import Pipeline, Strategy
from mlharness.loadgen.logs import check_loadgen_logs, detail_values, parse_summary
from mlharness.loadgen.qsl import SampleLoader, SampleStore
from mlharness.manifest.loader import load_manifest
from mlharness.manifest.schema import numpy_dtype
from mlharness.predictors.base import Predictor
from mlharness.run.context import resolve_load_workers
from mlharness.run.destination import absolute, check_destination, exclusive, lock_path
from mlharness.run.factory import check_outputs_by_running, make_instances, resolve_model_file
from mlharness.run.metadata import run_metadata
from mlharness.run.options import (
    DEFAULT_MANIFEST,
    METADATA_FILE,
    TRACE_FILE,
    Measured,
    RunOptions,
    RunResult,
)
from mlharness.run.plan import (
    LoadgenSettings,
    RunPlan,
    check_options,
    loadgen_settings,
    plan_run,
)
from mlharness.run.rundir import StagedDir, make_parent, write_result
from mlharness.tasks import METRICS
from mlharness.tasks.base import AccuracyContext, AccuracyResult, official_figure
from mlharness.telemetry.observe import RunObservers
from mlharness.telemetry.trace import level_at_least, make_tracer

log = logging.getLogger(__name__)


def run(opts: RunOptions) -> RunResult:
    """The whole run. Raises an MLHarnessError subclass on any failure; a failed run leaves earlier results."""
    check_options(opts)
    plan = plan_run(load_manifest(opts.manifest, opts.dataset, opts.framework), opts)
    dest = plan.destination
    # refused before the model loads or anything is written
    check_destination(dest.final, dest.ident, dest.results_root)
    conf = loadgen_settings(plan)
    preflight_accuracy(plan)
    predictors = make_instances(plan.loaded, plan.instances, resolve_model_file(plan.loaded), plan.batch,
                                plan.report.say)
    try:
        make_parent(dest.final)  # only now: a model that fails to load leaves no folder behind
        with exclusive(lock_path(dest.final), f"output {absolute(dest.final)}"):
            check_destination(dest.final, dest.ident, dest.results_root)  # what the lock's holder may have left
            return _run_locked(plan, conf, predictors)
    finally:
        close_all(predictors)


def _run_locked(plan: RunPlan, conf: LoadgenSettings, predictors: list[Predictor]) -> RunResult:
    if "before_postprocess" in plan.hooks:
        plan.hooks.call("before_postprocess", plan.ctx)
    staged = StagedDir(plan.destination.final, plan.destination.ident)
    if plan.report.on_stuck_failure is not None:
        # the callback may end the process (the CLI's does): first move the partial output to where every
        # failed run's goes, so it is not left behind as a hidden staging folder
        stuck = plan.report.on_stuck_failure
        plan = replace(plan, report=replace(plan.report,
                                            on_stuck_failure=lambda err, _outdir: stuck(err, staged.abandon())))
    with staged.guarded():  # a failure keeps the partial output as *.failed-<time>
        before = set(os.listdir(staged.path))
        measured = loadgen_test(plan, conf, predictors, staged.path)
        again = second_try.plan(conf.plan, conf.settings, measured.calibration, staged.path, plan.asked)
        if again is not None:  # a calibrated Server rate LoadGen found too high: once more, lower (second_try.py)
            measured = loadgen_test(plan, conf, predictors, staged.path, again=(again, before))
        accuracy = score_accuracy(plan, staged.path)
        metadata = run_metadata(plan, conf, predictors, measured, accuracy, staged.path)
        write_result(staged.path / METADATA_FILE, json.dumps(metadata, indent=2, default=str) + "\n")
    # the callers (sweeps, tune, bench) judge by the round's verdict; LoadGen's is metadata["result"]["loadgen_valid"]
    summary = replace(measured.summary, valid=metadata["result"]["valid"])
    return RunResult(staged.commit(), summary, accuracy, metadata)


def close_all(predictors: list[Predictor]) -> None:
    """Release every instance. A failure is reported, never raised: it would hide the run's own error, or come
    after a result that is complete and already in place."""
    for p in predictors:
        try:
            p.close()
        except Exception as e:  # noqa: BLE001 - reported; the others are still closed
            log.error("closing the %s predictor failed: %s: %s", type(p).__name__, type(e).__name__, e)


def loadgen_test(plan: RunPlan, conf: LoadgenSettings, predictors: list[Predictor], outdir: Path,
                 again: tuple[second_try.SecondTry, set[str]] | None = None) -> Measured:
    """The QSL, the SUT for the scenario and one LoadGen test writing its logs into ``outdir``. ``again``: the
    second play of a calibrated Server rate and the names ``outdir`` held before the first play; the first's
    files are set aside, and the bound and the calibration are the first's, not measured anew."""
    import mlperf_loadgen as lg

    loaded, hooks, ctx, report = plan.loaded, plan.hooks, plan.ctx, plan.report
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(outdir)
    log_settings.log_output.copy_summary_to_stdout = False
    tracer = make_tracer(plan.observe.trace)
    # LoadGen's own trace (it can be huge) only at the 'full' level
    log_settings.enable_trace = plan.observe.loadgen_trace or (tracer is not None
                                                               and level_at_least(tracer.level, "full"))
    audit_config = conf.plan.audit_config
    if audit_config is not None:
        if not Path(audit_config).is_file():
            raise SettingsError(f"audit config {audit_config} does not exist")
        audit = str(Path(audit_config).resolve())
    else:
        audit = str(outdir / "no-audit.config")  # explicit and absent: a stray audit.config in the CWD is ignored

    store = SampleStore(plan.total, len(loaded.model.inputs))
    loader = SampleLoader(hooks, ctx, store, resolve_load_workers(plan.load_workers, loaded),
                          on_progress=report.progress.load if report.progress else None, tracer=tracer)
    dtype = numpy_dtype(loaded.model.response.element_type)
    pipelines = [Pipeline(p, hooks, ctx, store, dtype, tracer=tracer) for p in predictors]
    strategy = Strategy.for_scenario(conf.plan.scenario, plan.batch, plan.server_max_wait_ms)
    finished = threading.Event()

    def on_failure(err: BaseException) -> None:
        if report.on_stuck_failure is None:
            return

        def watchdog() -> None:
            if not finished.wait(report.abort_grace_s):
                report.on_stuck_failure(err, outdir)

        threading.Thread(target=watchdog, name="mlharness-watchdog", daemon=True).start()

    kind = plan.kind
    parts = Parts(run=plan, conf=conf, predictors=predictors, pipelines=pipelines, store=store, loader=loader,
                  strategy=strategy, dtype=dtype, tracer=tracer, on_failure=on_failure, outdir=outdir)
    sut = kind.make_sut(parts)
    if again is None:
        if kind.check_outputs and plan.network != "lon":  # the declared outputs, where the framework told nothing
            check_outputs_by_running(loaded, pipelines[0], loader)
        kind.server_bound(parts)  # the Server bound before calibration, which plans the rate against it
        calibration = kind.calibrate(parts)  # first: the progress estimate reads the expected performance
    else:
        second, before = again
        calibration = {**second.calibration, "second_try": second.as_dict()}
        second_try.set_aside(outdir, before)
        second_try.apply(second, conf.settings, conf.plan, outdir)
        plan.asked.tell(second.line())
    if report.progress:
        report.progress.attach(sut, plan.total if plan.mode == "accuracy" else None, conf.settings)
    observers = RunObservers(predictors, tracer, plan.observe.telemetry_interval_ms)
    try:
        observers.start()
        sut.run_test(loader, plan.total, conf.performance_count, conf.settings, log_settings, audit,
                     warmup=loaded.model.framework.warmup if kind.sut_warmup else 0)
    finally:
        finished.set()
        if report.progress:
            report.progress.close()
        observers.stop()
    observers.write(outdir)
    for name in ("after_preprocess", "after_postprocess"):
        if name in hooks:
            try:
                hooks.call(name, ctx)
            except HookError as e:  # after the LoadGen test, like a sample's hook: the run failed, logs kept
                raise RunFailed(f"the run failed: {e}") from e

    if tracer is not None:
        tracer.write(outdir / TRACE_FILE, {"scenario": plan.scenario, "mode": plan.mode,
                                           "manifest": loaded.model.name})
    trace = outdir / "mlperf_log_trace.json"
    if not log_settings.enable_trace and trace.is_file() and trace.stat().st_size == 0:
        trace.unlink()  # LoadGen creates it even with tracing off
    check_loadgen_logs(outdir)
    return Measured(summary=parse_summary(outdir / "mlperf_log_summary.txt", plan.scenario, tokens=kind.tokens),
                    detail=detail_values(outdir / "mlperf_log_detail.txt"), strategy=strategy, sut=sut,
                    calibration=calibration, telemetry=observers.telemetry)


def preflight_accuracy(plan: RunPlan) -> None:
    """A run that will score accuracy checks what its metric needs beyond the log (bfcl_v4: bfcl-eval's
    environment) before the model loads: found missing after the run, the samples would be played for nothing.
    Only accuracy mode scores within a run (an audit's sampled responses are scored by ``submission``)."""
    spec = plan.loaded.model.accuracy
    if plan.mode == "accuracy" and spec is not None:
        METRICS.get(spec.metric)().preflight(accuracy_options(plan))


def accuracy_options(plan: RunPlan) -> dict[str, Any]:
    """The metric's options: the data kind's (a video's fps and shape) under the manifest's own."""
    return {**plan.kind.accuracy_options(plan.loaded.model), **plan.loaded.model.accuracy.options}


def score_accuracy(plan: RunPlan, outdir: Path) -> AccuracyResult | None:
    """Accuracy mode: the manifest's metric over the accuracy log, written as accuracy.txt."""
    spec = plan.loaded.model.accuracy
    if plan.mode != "accuracy" or spec is None:
        return None
    actx = AccuracyContext(
        dataset_path=Path(plan.ctx["dataset_path"]) if plan.ctx.get("dataset_path") else None,
        count=plan.total, options=accuracy_options(plan),
        response_dtype=plan.loaded.model.response.element_type,
    )
    accuracy = METRICS.get(spec.metric)().score(outdir / "mlperf_log_accuracy.json", actx)
    accuracy.official = official_figure(accuracy, spec.metric, plan.loaded.model.mlperf.model)
    write_result(outdir / "accuracy.txt", accuracy.text)
    return accuracy


__all__ = ["DEFAULT_MANIFEST", "RunOptions", "RunResult", "run", "MLHarnessError"]
