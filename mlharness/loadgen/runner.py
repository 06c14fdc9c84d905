"""One run: manifest → predictor → QSL → SUT for the scenario → LoadGen → accuracy → run directory."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mlharness import __version__
from mlharness.errors import (
    DatasetError,
    ManifestError,
    MLHarnessError,
    PredictorError,
    SettingsError,
    suggest,
)
from mlharness.loadgen import calibrate
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.explain import error_texts as explain_errors
from mlharness.loadgen.pipeline import Pipeline, Strategy
from mlharness.loadgen.qsl import SampleLoader, SampleStore, check_sample_count
from mlharness.loadgen.rundir import (
    StagedDir,
    Summary,
    check_loadgen_logs,
    default_output,
    detail_values,
    parse_summary,
    write_result,
)
from mlharness.loadgen.sut import NetworkQDL, SystemUnderTest
from mlharness.manifest.assets import cache_dir, resolve_asset
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import LoadedManifest, is_bare_version, load_manifest
from mlharness.manifest.names import check_path_component
from mlharness.manifest.schema import numpy_dtype
from mlharness.predictors import FRAMEWORK_PACKAGES, PREDICTORS
from mlharness.predictors.base import Predictor, PredictorConfig
from mlharness.tasks import METRICS
from mlharness.tasks.base import AccuracyContext, AccuracyResult
from mlharness.telemetry.observe import RunObservers, wants_profile
from mlharness.telemetry.sampler import DEFAULT_INTERVAL_MS
from mlharness.telemetry.sysinfo import host_facts
from mlharness.telemetry.trace import LEVELS, level_at_least, make_tracer

log = logging.getLogger(__name__)

DEFAULT_MANIFEST = "demo"
METADATA_FILE = "mlharness_run.json"
TRACE_FILE = "mlharness_trace.json"


@dataclass
class RunOptions:
    scenario: str
    mode: str = "accuracy"
    manifest: str | Path = DEFAULT_MANIFEST
    framework: str | None = None  # one of the manifest's framework variants (also NAME@FRAMEWORK)
    dataset: str | Path | None = None
    dataset_path: str | Path | None = None
    output: Path | None = None
    results_root: Path = Path("results")
    system: str = "default"
    user_conf: Path | None = None
    audit_config: Path | None = None
    count: int | None = None
    overrides: lgs.Overrides = field(default_factory=lgs.Overrides)
    max_batchsize: int | None = None
    server_max_wait_ms: float | None = None
    threads: int | None = None  # framework intra-op threads
    instances: int = 1  # predictor sessions, each driven by its own worker thread
    threads_per_instance: int | None = None  # default with several instances: the cores split evenly
    workers: int = 1  # SUT worker threads
    pin_cores: bool = False  # pin each instance (its framework threads and its runner) to its share of the cores
    load_workers: int | None = None  # None: the dataset manifest's load_workers, else 1; 0: one per core
    device: str = "cpu"
    trace: str = "none"  # none, model, framework, system, full (see mlharness.telemetry.trace)
    telemetry_interval_ms: float = DEFAULT_INTERVAL_MS  # host/GPU sampling during the run; 0 disables it
    ignore_framework_version: bool = False
    # Called (from a watchdog thread) when the timed path failed and LoadGen is still running after
    # ``abort_grace_s``; the CLI uses it to end the process instead of waiting out a long min_duration.
    on_stuck_failure: Callable[[BaseException, Path], None] | None = None
    abort_grace_s: float = 5.0
    progress: Any = None  # an object with load(done, total) / attach(sut, total, settings) / close(), or None
    calibrate: bool = True  # measure the expected performance when no user.conf or flag states it
    say: Callable[[str], None] | None = None  # one-line notices (the calibrated expected performance)
    # Remote agents (host:port): the model runs there (framework 'remote') with this manifest's inputs/outputs
    agents: list[str] = field(default_factory=list)
    network: str | None = None  # "lon": LoadGen over the network; the agents run the hooks (--hooks agent)
    round: str | None = None  # MLPerf round whose seeds the run uses (None: mlharness.rounds.DEFAULT_ROUND)
    agent_options: dict[str, Any] = field(default_factory=dict)  # token, tls_ca, tls_cert, tls_key for the agents


@dataclass
class RunResult:
    output: Path
    summary: Summary
    accuracy: AccuracyResult | None
    metadata: dict[str, Any]


def build_context(loaded: LoadedManifest, opts: RunOptions, batch_size: int) -> dict[str, Any]:
    m = loaded.model
    ds_path = opts.dataset_path
    if ds_path is None and loaded.dataset is not None and loaded.dataset.path:
        ds_path = loaded.dataset_directory / Path(loaded.dataset.path).expanduser()
    return {
        "name": m.name,
        "version": m.version,
        "framework": m.framework.name,
        "inputs": [i.model_dump() for i in m.inputs],
        "outputs": [o.model_dump() for o in m.outputs],
        "attributes": dict(m.attributes),
        "dataset_attributes": dict(loaded.dataset.attributes) if loaded.dataset else {},
        "batch_size": batch_size,
        "scenario": opts.scenario,
        "mode": opts.mode,
        "device": opts.device,
        "dataset_path": str(ds_path) if ds_path is not None else None,
        "manifest_dir": str(loaded.directory),
        "count": opts.count,
    }


def resolve_model_file(loaded: LoadedManifest) -> Path | None:
    asset = loaded.model.model
    if asset is None or asset.graph_path is None:
        return None
    if asset.generator:
        module, _, fn = asset.generator.partition(":")
        try:
            generate = getattr(importlib.import_module(module), fn)
        except (ImportError, AttributeError) as e:
            raise ManifestError(loaded.path, "model.generator", f"cannot import '{asset.generator}': {e}") from e
        target = cache_dir() / "generated" / loaded.model.name / Path(asset.graph_path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        return Path(generate(target))
    path = resolve_asset(asset.graph_path, asset.base_url, asset.graph_checksum, asset.is_archive,
                         manifest_dir=loaded.directory, progress=True)
    if asset.is_archive:
        if not asset.model_file:
            raise ManifestError(loaded.path, "model.model_file", "an archive needs the model's path inside it")
        path = path / asset.model_file
        if not path.exists():
            raise ManifestError(loaded.path, "model.model_file", f"{asset.model_file} is not in the archive")
    return path


def resolve_weights_file(loaded: LoadedManifest) -> Path | None:
    asset = loaded.model.model
    if asset is None or asset.weights_path is None or asset.factory is None:
        return None
    return resolve_asset(asset.weights_path, asset.base_url, asset.weights_checksum,
                         manifest_dir=loaded.directory, progress=True)


def check_framework_version(loaded: LoadedManifest, ignore: bool) -> str:
    from packaging.specifiers import SpecifierSet

    fw = loaded.model.framework
    candidates = FRAMEWORK_PACKAGES.get(fw.name, fw.name)
    candidates = (candidates,) if isinstance(candidates, str) else candidates
    installed = None
    for package in candidates:
        try:
            installed = importlib.metadata.version(package)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    if installed is None:
        raise PredictorError(f"framework '{fw.name}' needs the Python package '{candidates[0]}', which is not "
                             f"installed (try: pip install 'mlharness[all]')")
    spec = fw.version.strip()
    if spec in ("", "*", "latest"):
        return installed
    if is_bare_version(spec):
        if spec != installed:
            log.warning("%s was made with %s %s; running on %s", loaded.path, package, spec, installed)
        return installed
    if installed not in SpecifierSet(spec, prereleases=True) and not ignore:
        raise PredictorError(f"{loaded.path}: framework.version requires {package}{spec}, but {installed} is "
                             f"installed (--ignore-framework-version to run anyway)")
    return installed


def make_predictor(loaded: LoadedManifest, opts: RunOptions, model_file: Path | None, batch: int,
                   weights_file: Path | None = None) -> Predictor:
    """A loaded predictor. ``weights_file``: the factory's resolved state dict (resolved here when not given)."""
    m = loaded.model
    if weights_file is None:
        weights_file = resolve_weights_file(loaded)
    config = PredictorConfig(
        model_path=str(model_file) if model_file else None,
        input_names=[i.name for i in m.inputs],
        output_names=[o.name for o in m.outputs],
        device=opts.device,
        threads=opts.threads,
        options=dict(m.framework.options),
        max_batchsize=batch,
        factory=m.model.factory if m.model else None,
        weights_path=str(weights_file) if weights_file else None,
        input_specs=[i.model_dump() for i in m.inputs],
        output_specs=[o.model_dump() for o in m.outputs],
        model_name=m.name,
        manifest_path=str(loaded.path),
        profile=wants_profile(opts.trace),
    )
    predictor = PREDICTORS.get(m.framework.name)(config)
    predictor.load()
    return predictor


def run(opts: RunOptions) -> RunResult:
    """The whole run. Raises an MLHarnessError subclass on any failure; a failed run leaves earlier results."""
    lgs.check_scenario(opts.scenario)
    check_path_component(opts.system, "--system")
    if opts.trace not in LEVELS:
        raise SettingsError(f"unknown trace level '{opts.trace}'.{suggest(opts.trace, LEVELS)}")
    if opts.mode not in ("accuracy", "performance"):
        raise SettingsError(f"unknown mode '{opts.mode}'; expected accuracy or performance")
    loaded = load_manifest(opts.manifest, opts.dataset, opts.framework)
    m = loaded.model
    official = m.mlperf.model is not None
    conf_model = m.mlperf.model or m.name
    if official:
        lgs.check_model_name(conf_model)
    benchmark = m.mlperf.benchmark or conf_model
    batch = opts.max_batchsize or m.batching.for_scenario(opts.scenario)
    ctx = build_context(loaded, opts, batch)
    hooks = HookSet(loaded, ctx)

    total = _sample_count(hooks, opts, ctx)
    if opts.agents or opts.network:
        from mlharness.predictors.remote import remote_manifest

        # after the hooks are built: ctx["framework"] stays the one the agents run
        loaded = remote_manifest(loaded, opts.agents, opts.network, opts.agent_options)
    framework_version = check_framework_version(loaded, opts.ignore_framework_version)
    affinity = core_sets(max(1, opts.instances)) if opts.pin_cores else None
    predictors = make_instances(loaded, opts, resolve_model_file(loaded), batch, affinity)
    try:
        if "before_postprocess" in hooks:
            hooks.call("before_postprocess", ctx)
        plan = lgs.SettingsPlan(
            model=conf_model, official=official, scenario=opts.scenario, mode=opts.mode,
            user_conf=opts.user_conf if opts.user_conf is not None else lgs.default_user_conf(conf_model),
            overrides=opts.overrides, audit_config=opts.audit_config, round=opts.round or lgs.DEFAULT_ROUND,
        )
        settings = lgs.build_test_settings(plan)
        perf_count = _performance_count(settings, total, plan)
        output = opts.output or default_output(opts.results_root, opts.system, benchmark, opts.scenario, opts.mode)
        staged = StagedDir(Path(output))
        if opts.on_stuck_failure is not None:
            # the callback may end the process (the CLI's does): first move the partial output to where every
            # failed run's goes, so it is not left behind as a hidden staging folder
            stuck = opts.on_stuck_failure
            opts = replace(opts, on_stuck_failure=lambda err, _outdir: stuck(err, staged.abandon()))
        with staged.guarded():  # a failure keeps the partial output as *.failed-<time>
            summary, accuracy, metadata = _run_loadgen(
                loaded, opts, hooks, ctx, predictors, settings, plan, staged.path, total, perf_count, batch,
                benchmark, framework_version, affinity,
            )
        final = staged.commit()
        return RunResult(final, summary, accuracy, metadata)
    finally:
        for p in predictors:
            p.close()


def core_sets(instances: int, cores: list[int] | None = None) -> list[set[int]]:
    """The usable cores split into ``instances`` contiguous groups (instance i gets group i)."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else sorted(cores)
    if instances > len(cores):
        raise SettingsError(f"--pin-cores: {instances} instances cannot each have a core of their own on "
                            f"{len(cores)} usable cores ({cores})")
    per, extra = divmod(len(cores), instances)
    groups, start = [], 0
    for i in range(instances):
        size = per + (1 if i < extra else 0)
        groups.append(set(cores[start:start + size]))
        start += size
    return groups


@contextmanager
def _pinned(cores: set[int] | None) -> Iterator[None]:
    """Run the block with this thread pinned to ``cores``: threads a framework starts meanwhile (ONNX Runtime's
    intra-op pool) inherit the mask. The thread's own mask is restored afterwards."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def make_instances(loaded: LoadedManifest, opts: RunOptions, model_file: Path | None, batch: int,
                   affinity: list[set[int]] | None = None) -> list[Predictor]:
    """``opts.instances`` predictor sessions; with several, the cores are split between them unless
    ``threads_per_instance`` says otherwise (two sessions each grabbing every core would fight). With
    ``affinity`` (core pinning), instance i is created pinned to ``affinity[i]`` and uses that many threads."""
    n = max(1, opts.instances)
    threads = opts.threads_per_instance or opts.threads
    if n > 1 and threads is None:
        threads = max(1, (os.cpu_count() or 1) // n)
    weights_file = resolve_weights_file(loaded)  # once: verifying a large state dict's checksum takes seconds
    predictors: list[Predictor] = []
    try:
        for i in range(n):
            cores = affinity[i] if affinity else None
            per = replace(opts, threads=threads or (len(cores) if cores else None))
            with _pinned(cores):
                predictors.append(make_predictor(loaded, per, model_file, batch, weights_file))
    except BaseException:
        for p in predictors:
            p.close()
        raise
    return predictors


def resolve_load_workers(requested: int | None, loaded: LoadedManifest) -> int:
    """--load-workers, else the dataset manifest's ``load_workers``, else 1; 0 means one thread per CPU core."""
    workers = requested
    if workers is None and loaded.dataset is not None:
        workers = loaded.dataset.load_workers
    if workers is None:
        return 1
    if workers < 0:
        raise SettingsError(f"--load-workers must be >= 0, got {workers}")
    return workers or os.cpu_count() or 1


def _sample_count(hooks: HookSet, opts: RunOptions, ctx: dict[str, Any]) -> int:
    count = opts.count
    if "before_preprocess" in hooks:
        from_hook = hooks.call("before_preprocess", ctx)
        if isinstance(from_hook, int) and not isinstance(from_hook, bool) and from_hook > 0:
            count = min(count, from_hook) if count else from_hook
    if "init" in hooks:
        total = check_sample_count(hooks, count, hooks.call("init", count))
    elif count:
        total = count
    else:
        raise DatasetError("no dataset size: the manifest has no dataset init() hook; pass --count")
    ctx["count"] = total
    return total


def _performance_count(settings: Any, total: int, plan: lgs.SettingsPlan) -> int:
    wanted = int(settings.performance_sample_count_override)
    if wanted == 0 or wanted > total:
        if wanted > total:
            plan.not_submittable.append(
                f"performance_sample_count {wanted} from mlperf.conf exceeds the {total} samples available")
            settings.performance_sample_count_override = total
        return total
    return wanted


def _run_loadgen(loaded, opts, hooks, ctx, predictors, settings, plan, outdir, total, perf_count, batch,
                 benchmark, framework_version, affinity):  # noqa: ANN001 - internal step of run()
    import mlperf_loadgen as lg

    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(outdir)
    log_settings.log_output.copy_summary_to_stdout = False
    tracer = make_tracer(opts.trace)
    # LoadGen's own trace (it can be huge) only at the 'full' level
    log_settings.enable_trace = tracer is not None and level_at_least(tracer.level, "full")
    if opts.audit_config is not None:
        if not Path(opts.audit_config).is_file():
            raise SettingsError(f"audit config {opts.audit_config} does not exist")
        audit = str(Path(opts.audit_config).resolve())
    else:
        audit = str(outdir / "no-audit.config")  # explicit and absent: a stray audit.config in the CWD is ignored

    store = SampleStore(total, len(loaded.model.inputs))
    loader = SampleLoader(hooks, ctx, store, resolve_load_workers(opts.load_workers, loaded),
                          on_progress=opts.progress.load if opts.progress else None, tracer=tracer)
    dtype = numpy_dtype(loaded.model.response.element_type)
    pipelines = [Pipeline(p, hooks, ctx, store, dtype, tracer=tracer) for p in predictors]
    strategy = Strategy.for_scenario(
        opts.scenario, batch,
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

    if opts.network == "lon":
        sut = NetworkQDL(predictors[0], on_failure=on_failure)  # the agents run the hooks and the model
    else:
        sut = SystemUnderTest(pipelines, strategy, opts.workers, on_failure=on_failure, tracer=tracer,
                              affinity=affinity)
    # calibrated first: the progress estimate reads the expected performance from the settings
    calibration = calibrate.for_run(opts, plan, settings, pipelines, loader, perf_count, batch,
                                    loaded.model.framework.warmup, outdir)
    if opts.progress:
        opts.progress.attach(sut, total if opts.mode == "accuracy" else None, settings)
    observers = RunObservers(predictors, tracer, opts.telemetry_interval_ms)
    try:
        observers.start()
        sut.run_test(loader, total, perf_count, settings, log_settings, audit, warmup=loaded.model.framework.warmup)
    finally:
        finished.set()
        if opts.progress:
            opts.progress.close()
        observers.stop()
    observers.write(outdir)
    for name in ("after_preprocess", "after_postprocess"):
        if name in hooks:
            hooks.call(name, ctx)

    if tracer is not None:
        tracer.write(outdir / TRACE_FILE, {"scenario": opts.scenario, "mode": opts.mode,
                                           "manifest": loaded.model.name})
    trace = outdir / "mlperf_log_trace.json"
    if not log_settings.enable_trace and trace.is_file() and trace.stat().st_size == 0:
        trace.unlink()  # LoadGen creates it even with tracing off
    check_loadgen_logs(outdir)
    summary = parse_summary(outdir / "mlperf_log_summary.txt", opts.scenario)
    detail = detail_values(outdir / "mlperf_log_detail.txt")
    accuracy = None
    if opts.mode == "accuracy" and loaded.model.accuracy is not None:
        metric = METRICS.get(loaded.model.accuracy.metric)()
        actx = AccuracyContext(
            dataset_path=Path(ctx["dataset_path"]) if ctx.get("dataset_path") else None,
            count=total, options=dict(loaded.model.accuracy.options),
        )
        accuracy = metric.score(outdir / "mlperf_log_accuracy.json", actx)
        write_result(outdir / "accuracy.txt", accuracy.text)

    given = plan.overrides.given()
    reasons = list(plan.not_submittable)
    if given:
        reasons.append(f"development overrides: {', '.join(f'{k}={v}' for k, v in given.items())}")
    if opts.count:
        reasons.append(f"--count {opts.count} limits the dataset")
    if not plan.official:
        reasons.append("the manifest names no MLPerf benchmark (mlperf.model): not an official benchmark")
    if detail["errors"]:
        reasons.append(f"LoadGen logged errors: {'; '.join(explain_errors(detail['errors']))}")
    metadata = {
        "mlharness_version": __version__,
        "manifest": {"name": loaded.model.name, "version": loaded.model.version, "path": str(loaded.path),
                     "sha256": loaded.source.sha256},
        "dataset_manifest": (
            {"name": loaded.dataset.name, "sha256": (loaded.dataset_source or loaded.source).sha256}
            if loaded.dataset else None),
        "benchmark": benchmark,
        "dataset_path": ctx.get("dataset_path"),  # as init() left it: what the accuracy metric scored against
        "conf_model": plan.model,
        "official_benchmark": plan.official,
        "scenario": opts.scenario,
        "mode": opts.mode,
        "response_element_type": loaded.model.response.element_type,  # what TEST01 compares the responses in
        "submittable": not reasons,
        "not_submittable_reasons": reasons,
        "framework": {"name": loaded.model.framework.name, "version": framework_version},
        "predictor": {**predictors[0].describe(), "instances": len(predictors)},
        "loadgen_version": importlib.metadata.version("mlcommons-loadgen"),
        "round": plan.round,
        "loadgen_seeds": {k: detail.get(f"effective_{k}") for k in ("qsl_rng_seed", "sample_index_rng_seed",
                                                                     "schedule_rng_seed")},
        "user_conf": str(plan.user_conf) if plan.user_conf else None,
        "audit_config": str(opts.audit_config) if opts.audit_config else None,
        "overrides": given,
        "settings": lgs.describe_settings(settings),
        "batching": {"strategy": strategy.name, "max_batchsize": batch,
                     "coalesce_wait_s": strategy.coalesce_wait_s,
                     "workers": getattr(sut, "n_workers", None), "inline": getattr(sut, "inline", False),
                     "pinned_cores": [sorted(c) for c in sut.affinity] if getattr(sut, "affinity", None) else None},
        "samples": {"total": total, "performance_sample_count": perf_count, "issued": sut.issued,
                    "completed": sut.completed, "batches": sut.batches},
        "result": {**asdict(summary), "fields": None},
        "accuracy": ({"name": accuracy.name, "value": accuracy.value, "text": accuracy.text,
                      "official": accuracy.official} if accuracy else None),
        "calibration": calibration,
        "loadgen_errors": detail["errors"],
        "host": host_facts(),
        "telemetry": observers.telemetry,
    }
    write_result(outdir / METADATA_FILE, json.dumps(metadata, indent=2, default=str) + "\n")
    return summary, accuracy, metadata


__all__ = ["RunOptions", "RunResult", "run", "MLHarnessError"]
