"""What a run is, before anything is timed: its manifest with the hooks compiled, the context the hooks see, the
dataset size, the framework version, and the LoadGen settings with the performance sample count."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mlharness.calibration import calibrate_dev
from mlharness.calibration.asked import Asked
from mlharness.errors import SettingsError, suggest
from mlharness.kinds.base import Kind
from mlharness.kinds.registry import check_inputs, data_kind
from mlharness.loadgen import bounds
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.pinning import core_sets
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import LoadedManifest
from mlharness.manifest.names import check_path_component
from mlharness.rounds import check_in_suite
from mlharness.run.context import build_context, sample_count
from mlharness.run.destination import absolute, identity
from mlharness.run.factory import Instances, check_framework_version
from mlharness.run.options import RunOptions
from mlharness.run.rundir import default_output
from mlharness.telemetry.observe import wants_profile
from mlharness.telemetry.sampler import DEFAULT_INTERVAL_MS
from mlharness.telemetry.trace import LEVELS


def check_options(opts: RunOptions) -> None:
    """Refuse what no run could do before loading anything."""
    lgs.check_scenario(opts.scenario, interactive=True)
    check_path_component(opts.system, "--system")
    if opts.trace not in LEVELS:
        raise SettingsError(f"unknown trace level '{opts.trace}'.{suggest(opts.trace, LEVELS)}")
    if opts.mode not in ("accuracy", "performance"):
        raise SettingsError(f"unknown mode '{opts.mode}'; expected accuracy or performance")
    bounds.check_run_options({name: getattr(opts, name) for name in bounds.RUN_OPTION_FLAGS}, opts.overrides,
                             opts.device)
    # the files' lines and values now, before the model loads (the model name is checked once it is known)
    if opts.user_conf is not None:
        lgs.validate_user_conf(opts.user_conf, None)
    if opts.audit_config is not None:
        lgs.check_audit_config(opts.audit_config)


@dataclass(frozen=True)
class Destination:
    """Where the run's results go, and what the folder's marker says the run is."""

    final: Path
    ident: dict[str, str]
    results_root: Path


@dataclass(frozen=True)
class Observe:
    """What the run records beside LoadGen's logs: its trace level, LoadGen's own trace, host sampling."""

    trace: str = "none"
    loadgen_trace: bool = False
    telemetry_interval_ms: float = DEFAULT_INTERVAL_MS


@dataclass(frozen=True)
class Report:
    """Who hears from the run while it runs: notices, the progress bar, and the CLI's way out of a stuck test."""

    say: Callable[[str], None] | None = None
    progress: Any = None  # load(done, total) / attach(sut, total, settings) / close(), or None
    on_stuck_failure: Callable[[BaseException, Path], None] | None = None
    abort_grace_s: float = 5.0


@dataclass
class RunPlan:
    loaded: LoadedManifest  # for remote agents, the manifest whose framework is 'remote'
    hooks: HookSet
    ctx: dict[str, Any]
    total: int  # samples in the QSL
    official: bool  # the manifest names an MLPerf model (mlperf.model)
    conf_model: str  # the model name of the user.conf / mlperf.conf lines
    benchmark: str  # the results directory name
    batch: int
    framework_version: str
    scenario: str
    mode: str
    kind: Kind  # what the model answers with, and what that needs of the run (mlharness/kinds/)
    settings: lgs.SettingsPlan  # mlperf.conf + user.conf + overrides + the round, for loadgen_settings
    destination: Destination
    instances: Instances
    asked: Asked  # what calibration is told
    observe: Observe
    report: Report
    count: int | None = None  # --count: limits the dataset (the run is then not submittable)
    network: str | None = None  # "lon": LoadGen over the network, the agents run the hooks and the model
    load_workers: int | None = None
    workers: int = 1  # SUT worker threads
    server_max_wait_ms: float | None = None  # the Server batcher's wait (None: the manifest's)

    @property
    def tokens(self) -> bool:
        return self.kind.tokens

    @property
    def affinity(self) -> list[set[int]] | None:
        return self.instances.affinity


def _absolute(path: Path | None) -> Path | None:
    return None if path is None else absolute(path)


def plan_run(loaded: LoadedManifest, opts: RunOptions) -> RunPlan:
    """Compile the hooks, ask the dataset for its size, check the framework the model needs, and turn the options
    into the parts each later step takes. No step after this one sees the options."""
    # the folders and files named relative to the current folder are fixed before the first line of manifest code
    # runs: a hook's os.chdir must not move where the results go
    opts = replace(opts, results_root=absolute(opts.results_root), output=_absolute(opts.output),
                   user_conf=_absolute(opts.user_conf), audit_config=_absolute(opts.audit_config))
    m = loaded.model
    bounds.check_manifest_numbers(loaded)
    check_inputs(loaded)  # an input kind's own parameters (a pipeline's stage list)
    official = m.mlperf.model is not None
    kind = data_kind(m)
    if opts.scenario == lgs.INTERACTIVE and not kind.tokens:
        raise SettingsError(f"{loaded.path}: the Interactive scenario is for models that stream tokens "
                            "(response.kind: tokens)")
    if lgs.loadgen_scenario(opts.scenario) == "MultiStream" and kind.not_multistream:
        raise SettingsError(f"{loaded.path}: --scenario MultiStream: a {kind.name} model (response.kind: {kind.name}) "
                            "cannot run it (LoadGen issues a MultiStream query as several samples together and times "
                            f"them as one): {kind.not_multistream}")
    conf_model = lgs.conf_model_for(m.mlperf.model or m.name, opts.scenario)
    if official:
        lgs.check_model_name(conf_model)
    # an MLPerf benchmark the round's suite lacks is refused before anything loads (not a name no round has)
    check_in_suite(opts.round, m.mlperf.benchmark or m.mlperf.model, str(loaded.path))
    # a framework that is not installed is named, with the extra that brings it, before the hooks import anything
    local = not (opts.agents or opts.network or opts.endpoints)
    version = check_framework_version(loaded, opts.ignore_framework_version) if local else None
    batch = opts.max_batchsize or m.batching.for_scenario(lgs.loadgen_scenario(opts.scenario))
    ctx = build_context(loaded, batch, scenario=opts.scenario, mode=opts.mode, device=opts.device,
                        dataset_path=opts.dataset_path, count=opts.count)
    hooks = HookSet(loaded, ctx)
    total = sample_count(hooks, opts.count, ctx)
    if opts.agents or opts.network:
        from mlharness.predictors.remote import remote_manifest

        # after the hooks are built: ctx["framework"] stays the one the agents run
        loaded = remote_manifest(loaded, opts.agents, opts.network, opts.agent_options)
    if opts.endpoints and kind.with_endpoints is not None:
        loaded = kind.with_endpoints(loaded, opts.endpoints)  # the kind says what the servers take (a pipeline's)
    elif opts.endpoints:
        from mlharness.predictors.openai import endpoint_manifest

        loaded = endpoint_manifest(loaded, opts.endpoints)  # generation by OpenAI-compatible servers
    benchmark = m.mlperf.benchmark or m.mlperf.model or m.name
    return RunPlan(
        loaded=loaded, hooks=hooks, ctx=ctx, total=total, official=official, conf_model=conf_model,
        benchmark=benchmark, batch=batch, kind=kind, scenario=opts.scenario, mode=opts.mode,
        framework_version=version if local else check_framework_version(loaded, opts.ignore_framework_version),
        settings=lgs.SettingsPlan(
            model=conf_model, official=official, scenario=lgs.loadgen_scenario(opts.scenario), mode=opts.mode,
            user_conf=opts.user_conf if opts.user_conf is not None else lgs.default_user_conf(conf_model),
            overrides=opts.overrides, audit_config=opts.audit_config, round=opts.round or lgs.DEFAULT_ROUND,
            token_latencies=kind.tokens),
        destination=Destination(
            final=Path(opts.output or default_output(opts.results_root, opts.system, benchmark, opts.scenario,
                                                     opts.mode)),
            ident=identity(benchmark, opts.scenario, opts.mode), results_root=opts.results_root),
        instances=Instances(
            count=opts.instances, device=opts.device, threads=opts.threads,
            threads_per_instance=opts.threads_per_instance, profile=wants_profile(opts.trace),
            affinity=core_sets(max(1, opts.instances)) if opts.pin_cores else None),
        asked=Asked(calibrate=opts.calibrate, user_conf=opts.user_conf, network=opts.network, say=opts.say,
                    second_try=opts.second_try),
        observe=Observe(opts.trace, opts.loadgen_trace, opts.telemetry_interval_ms),
        report=Report(opts.say, opts.progress, opts.on_stuck_failure, opts.abort_grace_s),
        count=opts.count, network=opts.network, load_workers=opts.load_workers, workers=opts.workers,
        server_max_wait_ms=(opts.server_max_wait_ms if opts.server_max_wait_ms is not None
                            else m.batching.server_max_wait_ms),
    )


@dataclass
class LoadgenSettings:
    plan: lgs.SettingsPlan
    settings: Any  # mlperf_loadgen.TestSettings
    performance_count: int


def loadgen_settings(run: RunPlan) -> LoadgenSettings:
    """The embedded mlperf.conf, the user.conf and the overrides for this model and scenario (the round's seeds);
    an audit run of a development submission is sized as the performance run it audits (calibrate_dev)."""
    settings = lgs.build_test_settings(run.settings)
    restored = calibrate_dev.audit_counts(run.settings, settings)
    if restored is not None:
        run.asked.tell(restored)
    return LoadgenSettings(run.settings, settings, performance_count(settings, run.total, run.settings))


def performance_count(settings: Any, total: int, plan: lgs.SettingsPlan) -> int:
    """mlperf.conf's performance sample count, or every sample when the dataset has fewer."""
    wanted = int(settings.performance_sample_count_override)
    if wanted == 0 or wanted > total:
        if wanted > total:
            plan.not_submittable.append(
                f"performance_sample_count {wanted} from mlperf.conf exceeds the {total} samples available")
            settings.performance_sample_count_override = total
        return total
    return wanted
