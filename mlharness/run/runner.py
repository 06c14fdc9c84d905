"""One run: manifest → predictor instances → QSL → SUT for the scenario → LoadGen → accuracy → run directory.

:func:`run` is the whole run as its steps; what each step needs lives in a module named for it: the plan of the
run (:mod:`.plan`), the predictor factory (:mod:`.factory`), core pinning (:mod:`.pinning`), the SUT
(:mod:`.sut`) and the run metadata (:mod:`.metadata`).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from pathlib import Path

from mlharness.calibration import calibrate, calibrate_tokens, server_bound
from mlharness.errors import HookError, MLHarnessError, RunFailed, SettingsError
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import check_loadgen_logs, detail_values, parse_summary
from mlharness.loadgen.pipeline import Pipeline, Strategy
from mlharness.loadgen.qsl import SampleLoader, SampleStore
from mlharness.loadgen.sut import NetworkQDL, SystemUnderTest
from mlharness.loadgen.tokens import TokenSUT, check_generative
from mlharness.manifest.loader import load_manifest
from mlharness.manifest.schema import numpy_dtype
from mlharness.predictors.base import Predictor
from mlharness.run.context import resolve_load_workers
from mlharness.run.destination import absolute, check_destination, exclusive, identity, lock_path
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
from mlharness.run.rundir import StagedDir, default_output, make_parent, write_result
from mlharness.tasks import METRICS
from mlharness.tasks.base import AccuracyContext, AccuracyResult, official_figure
from mlharness.telemetry.observe import RunObservers
from mlharness.telemetry.trace import level_at_least, make_tracer

log = logging.getLogger(__name__)


def run(opts: RunOptions) -> RunResult:
    """The whole run. Raises an MLHarnessError subclass on any failure; a failed run leaves earlier results."""
    check_options(opts)
    plan = plan_run(load_manifest(opts.manifest, opts.dataset, opts.framework), opts)
    final = Path(opts.output or default_output(opts.results_root, opts.system, plan.benchmark, opts.scenario,
                                               opts.mode))
    ident = identity(plan.benchmark, opts.scenario, opts.mode)
    check_destination(final, ident, opts.results_root)  # refused before the model loads or anything is written
    conf = loadgen_settings(plan, opts)
    predictors = make_instances(plan.loaded, opts, resolve_model_file(plan.loaded), plan.batch, plan.affinity)
    try:
        make_parent(final)  # only now: a model that fails to load leaves no folder behind
        with exclusive(lock_path(final), f"output {absolute(final)}"):
            check_destination(final, ident, opts.results_root)  # what the lock's holder may have left there
            return _run_locked(plan, conf, opts, predictors, final, ident)
    finally:
        close_all(predictors)


def _run_locked(plan: RunPlan, conf: LoadgenSettings, opts: RunOptions, predictors: list[Predictor], final: Path,
                ident: dict[str, str]) -> RunResult:
    if "before_postprocess" in plan.hooks:
        plan.hooks.call("before_postprocess", plan.ctx)
    staged = StagedDir(final, ident)
    if opts.on_stuck_failure is not None:
        # the callback may end the process (the CLI's does): first move the partial output to where every
        # failed run's goes, so it is not left behind as a hidden staging folder
        stuck = opts.on_stuck_failure
        opts = replace(opts, on_stuck_failure=lambda err, _outdir: stuck(err, staged.abandon()))
    with staged.guarded():  # a failure keeps the partial output as *.failed-<time>
        measured = loadgen_test(plan, conf, opts, predictors, staged.path)
        accuracy = score_accuracy(plan, opts, staged.path)
        metadata = run_metadata(plan, conf, opts, predictors, measured, accuracy)
        write_result(staged.path / METADATA_FILE, json.dumps(metadata, indent=2, default=str) + "\n")
    return RunResult(staged.commit(), measured.summary, accuracy, metadata)


def close_all(predictors: list[Predictor]) -> None:
    """Release every instance. A failure is reported, never raised: it would hide the run's own error, or come
    after a result that is complete and already in place."""
    for p in predictors:
        try:
            p.close()
        except Exception as e:  # noqa: BLE001 - reported; the others are still closed
            log.error("closing the %s predictor failed: %s: %s", type(p).__name__, type(e).__name__, e)


def loadgen_test(plan: RunPlan, conf: LoadgenSettings, opts: RunOptions, predictors: list[Predictor],
                 outdir: Path) -> Measured:
    """The QSL, the SUT for the scenario and one LoadGen test writing its logs into ``outdir``."""
    import mlperf_loadgen as lg

    loaded, hooks, ctx = plan.loaded, plan.hooks, plan.ctx
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(outdir)
    log_settings.log_output.copy_summary_to_stdout = False
    tracer = make_tracer(opts.trace)
    # LoadGen's own trace (it can be huge) only at the 'full' level
    log_settings.enable_trace = opts.loadgen_trace or (tracer is not None and level_at_least(tracer.level, "full"))
    if opts.audit_config is not None:
        if not Path(opts.audit_config).is_file():
            raise SettingsError(f"audit config {opts.audit_config} does not exist")
        audit = str(Path(opts.audit_config).resolve())
    else:
        audit = str(outdir / "no-audit.config")  # explicit and absent: a stray audit.config in the CWD is ignored

    store = SampleStore(plan.total, len(loaded.model.inputs))
    loader = SampleLoader(hooks, ctx, store, resolve_load_workers(opts.load_workers, loaded),
                          on_progress=opts.progress.load if opts.progress else None, tracer=tracer)
    dtype = numpy_dtype(loaded.model.response.element_type)
    pipelines = [Pipeline(p, hooks, ctx, store, dtype, tracer=tracer) for p in predictors]
    strategy = Strategy.for_scenario(
        lgs.loadgen_scenario(opts.scenario), plan.batch,
        opts.server_max_wait_ms if opts.server_max_wait_ms is not None else loaded.model.batching.server_max_wait_ms,
    )
    finished = threading.Event()

    def on_failure(err: BaseException) -> None:
        if opts.on_stuck_failure is None:
            return

        def watchdog() -> None:
            if not finished.wait(opts.abort_grace_s):
                opts.on_stuck_failure(err, outdir)

        threading.Thread(target=watchdog, name="mlharness-watchdog", daemon=True).start()

    if plan.tokens:  # a generative model: token streams, TTFT and TPOT
        sut = TokenSUT(check_generative(predictors, loaded), store,
                       lgs.loadgen_scenario(opts.scenario), on_failure=on_failure, warmup=loaded.model.framework.warmup,
                       response_dtype=dtype)
    elif opts.network == "lon":
        sut = NetworkQDL(predictors[0], on_failure=on_failure)  # the agents run the hooks and the model
    else:
        sut = SystemUnderTest(pipelines, strategy, opts.workers, on_failure=on_failure, tracer=tracer,
                              affinity=plan.affinity)
    if not plan.tokens and opts.network != "lon":  # the declared outputs, where the framework told nothing
        check_outputs_by_running(loaded, pipelines[0], loader)
    # the Server bound before calibration, which plans the rate against it
    server_bound.for_run(opts, conf.plan, conf.settings, [] if plan.tokens else pipelines, loader,
                         conf.performance_count, plan.official, plan.tokens, loaded.model.framework.warmup)
    # calibrated first: the progress estimate reads the expected performance from the settings
    calibration = calibrate_tokens.for_run(
        opts, conf.plan, conf.settings, sut.predictors, store, loader, conf.performance_count,
        loaded.model.framework.warmup, outdir) if isinstance(sut, TokenSUT) else calibrate.for_run(
        opts, conf.plan, conf.settings, pipelines, loader, conf.performance_count, plan.batch,
        loaded.model.framework.warmup, outdir, affinity=plan.affinity)
    if opts.progress:
        opts.progress.attach(sut, plan.total if opts.mode == "accuracy" else None, conf.settings)
    observers = RunObservers(predictors, tracer, opts.telemetry_interval_ms)
    try:
        observers.start()
        sut.run_test(loader, plan.total, conf.performance_count, conf.settings, log_settings, audit,
                     warmup=0 if plan.tokens else loaded.model.framework.warmup)
    finally:
        finished.set()
        if opts.progress:
            opts.progress.close()
        observers.stop()
    observers.write(outdir)
    for name in ("after_preprocess", "after_postprocess"):
        if name in hooks:
            try:
                hooks.call(name, ctx)
            except HookError as e:  # after the LoadGen test, like a sample's hook: the run failed, logs kept
                raise RunFailed(f"the run failed: {e}") from e

    if tracer is not None:
        tracer.write(outdir / TRACE_FILE, {"scenario": opts.scenario, "mode": opts.mode,
                                           "manifest": loaded.model.name})
    trace = outdir / "mlperf_log_trace.json"
    if not log_settings.enable_trace and trace.is_file() and trace.stat().st_size == 0:
        trace.unlink()  # LoadGen creates it even with tracing off
    check_loadgen_logs(outdir)
    return Measured(summary=parse_summary(outdir / "mlperf_log_summary.txt", opts.scenario, tokens=plan.tokens),
                    detail=detail_values(outdir / "mlperf_log_detail.txt"), strategy=strategy, sut=sut,
                    calibration=calibration, telemetry=observers.telemetry)


def score_accuracy(plan: RunPlan, opts: RunOptions, outdir: Path) -> AccuracyResult | None:
    """Accuracy mode: the manifest's metric over the accuracy log, written as accuracy.txt."""
    spec = plan.loaded.model.accuracy
    if opts.mode != "accuracy" or spec is None:
        return None
    actx = AccuracyContext(
        dataset_path=Path(plan.ctx["dataset_path"]) if plan.ctx.get("dataset_path") else None,
        count=plan.total, options=dict(spec.options), response_dtype=plan.loaded.model.response.element_type,
    )
    accuracy = METRICS.get(spec.metric)().score(outdir / "mlperf_log_accuracy.json", actx)
    accuracy.official = official_figure(accuracy, spec.metric, plan.loaded.model.mlperf.model)
    write_result(outdir / "accuracy.txt", accuracy.text)
    return accuracy


__all__ = ["DEFAULT_MANIFEST", "RunOptions", "RunResult", "run", "MLHarnessError"]
