"""What a run is, before anything is timed: its manifest with the hooks compiled, the context the hooks see, the
dataset size, the framework version, and the LoadGen settings with the performance sample count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlharness.errors import SettingsError, suggest
from mlharness.loadgen import bounds
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.pinning import core_sets
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import LoadedManifest
from mlharness.manifest.names import check_path_component
from mlharness.manifest.schema import streams_tokens
from mlharness.rounds import check_in_suite
from mlharness.run.context import build_context, sample_count
from mlharness.run.factory import check_framework_version
from mlharness.run.options import RunOptions
from mlharness.telemetry.trace import LEVELS


def check_options(opts: RunOptions) -> None:
    """Refuse what no run could do before loading anything."""
    lgs.check_scenario(opts.scenario, interactive=True)
    check_path_component(opts.system, "--system")
    if opts.trace not in LEVELS:
        raise SettingsError(f"unknown trace level '{opts.trace}'.{suggest(opts.trace, LEVELS)}")
    if opts.mode not in ("accuracy", "performance"):
        raise SettingsError(f"unknown mode '{opts.mode}'; expected accuracy or performance")
    bounds.check_run_options(opts)
    # the files' lines and values now, before the model loads (the model name is checked once it is known)
    if opts.user_conf is not None:
        lgs.validate_user_conf(opts.user_conf, None)
    if opts.audit_config is not None:
        lgs.check_audit_config(opts.audit_config)


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
    affinity: list[set[int]] | None  # --pin-cores: the cores of each instance
    tokens: bool = False  # the responses are token streams (a generative model)


def plan_run(loaded: LoadedManifest, opts: RunOptions) -> RunPlan:
    """Compile the hooks, ask the dataset for its size, and check the framework the model needs."""
    m = loaded.model
    bounds.check_manifest_numbers(loaded)
    official = m.mlperf.model is not None
    tokens = streams_tokens(m)
    if opts.scenario == lgs.INTERACTIVE and not tokens:
        raise SettingsError(f"{loaded.path}: the Interactive scenario is for models that stream tokens "
                            "(response.kind: tokens)")
    conf_model = lgs.conf_model_for(m.mlperf.model or m.name, opts.scenario)
    if official:
        lgs.check_model_name(conf_model)
    # an MLPerf benchmark the round's suite lacks is refused before anything loads (not a name no round has)
    check_in_suite(opts.round, m.mlperf.benchmark or m.mlperf.model, str(loaded.path))
    # a framework that is not installed is named, with the extra that brings it, before the hooks import anything
    local = not (opts.agents or opts.network or opts.endpoints)
    version = check_framework_version(loaded, opts.ignore_framework_version) if local else None
    batch = opts.max_batchsize or m.batching.for_scenario(lgs.loadgen_scenario(opts.scenario))
    ctx = build_context(loaded, opts, batch)
    hooks = HookSet(loaded, ctx)
    total = sample_count(hooks, opts, ctx)
    if opts.agents or opts.network:
        from mlharness.predictors.remote import remote_manifest

        # after the hooks are built: ctx["framework"] stays the one the agents run
        loaded = remote_manifest(loaded, opts.agents, opts.network, opts.agent_options)
    if opts.endpoints:
        from mlharness.predictors.openai import endpoint_manifest

        loaded = endpoint_manifest(loaded, opts.endpoints)  # generation by OpenAI-compatible servers
    return RunPlan(
        loaded=loaded, hooks=hooks, ctx=ctx, total=total, official=official, conf_model=conf_model,
        benchmark=m.mlperf.benchmark or m.mlperf.model or m.name, batch=batch, tokens=tokens,
        framework_version=version if local else check_framework_version(loaded, opts.ignore_framework_version),
        affinity=core_sets(max(1, opts.instances)) if opts.pin_cores else None,
    )


@dataclass
class LoadgenSettings:
    plan: lgs.SettingsPlan
    settings: Any  # mlperf_loadgen.TestSettings
    performance_count: int


def loadgen_settings(run: RunPlan, opts: RunOptions) -> LoadgenSettings:
    """The embedded mlperf.conf, the user.conf and the overrides for this model and scenario (the round's seeds)."""
    plan = lgs.SettingsPlan(
        model=run.conf_model, official=run.official, scenario=lgs.loadgen_scenario(opts.scenario), mode=opts.mode,
        user_conf=opts.user_conf if opts.user_conf is not None else lgs.default_user_conf(run.conf_model),
        overrides=opts.overrides, audit_config=opts.audit_config, round=opts.round or lgs.DEFAULT_ROUND,
        token_latencies=run.tokens,
    )
    settings = lgs.build_test_settings(plan)
    return LoadgenSettings(plan, settings, performance_count(settings, run.total, plan))


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
