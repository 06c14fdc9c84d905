"""The stage list of a pipeline manifest, parsed and checked in one place: ``inputs[0].parameters.stages``, each
entry a :class:`~mlharness.kinds.pipeline.stage.StageSpec`. Every error is a :class:`ManifestError` naming the manifest
and the field path (``inputs[0].parameters.stages[2].workers``), refused before any stage loads (exit 2).

Checked: each entry is a mapping of StageSpec's fields only; names are unique; the framework is a built-in stage
(:data:`~mlharness.kinds.pipeline.stage.STAGES`, filled by the modules of :data:`STAGE_MODULES`) or a predictor name;
``workers``, ``max_visits`` and ``threads`` (each worker's torch threads; null: torch's default) are whole numbers
>= 1 (workers and threads at most :data:`mlharness.numbers.MAX_WORKERS`); ``timeout_s`` is finite, > 0 and at most a
week (:mod:`mlharness.numbers`); an ``options.route_to`` (the stage declaring that its ``after`` hook or itself
sends items back) names this stage or an earlier one.
"""

from __future__ import annotations

import importlib
from dataclasses import fields, replace
from typing import Any

from mlharness import numbers
from mlharness.errors import ManifestError
from mlharness.kinds.pipeline.stage import STAGES, StageSpec

PIPELINE_INPUT = "pipeline"
# modules registering built-in stages with @register_stage; imported before a stage list is checked (a module a
# missing optional package keeps out is skipped: its frameworks are then unknown, and named as such)
STAGE_MODULES = ("mlharness.kinds.pipeline.toy", "mlharness.kinds.pipeline.retrieval", "mlharness.kinds.pipeline.rerank",
                 "mlharness.kinds.pipeline.index", "mlharness.kinds.pipeline.dbbuild", "mlharness.tasks.e2e_rag.oracle")
SPEC_FIELDS = {f.name for f in fields(StageSpec)}
NOT_A_STAGE = ("pipeline",)  # a pipeline is not one of its own stages
MAX_VISITS = 10_000  # an item routed back more often than this is a loop, not a plan
_WHY = {"workers": "each worker is a thread; more is a typo, and can abort the process",
        "threads": "each worker's torch threads", "max_visits": "an item's passes through this stage"}


def builtin_stages() -> dict[str, Any]:
    """The registry of built-in stages, every module of :data:`STAGE_MODULES` that imports having registered."""
    for name in STAGE_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name and (e.name or "mlharness").split(".")[0] == "mlharness":
                raise  # a module of ours missing is a bug, not an optional stage
    return STAGES


def known_frameworks() -> list[str]:
    from mlharness.predictors import PREDICTORS

    return sorted(set(builtin_stages()) | (set(PREDICTORS.names()) - set(NOT_A_STAGE)))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def stage_specs(params: dict[str, Any] | None, manifest: Any, where: str = "inputs[0].parameters") -> list[StageSpec]:
    """The checked stages of a pipeline input's ``parameters``."""
    params = dict(params or {})
    unknown = sorted(set(params) - {"stages"})
    if unknown:
        raise ManifestError(manifest, f"{where}.{unknown[0]}", "unknown key; a pipeline input's parameters hold "
                            "'stages' (the ordered list of stages)")
    stages = params.get("stages")
    if not isinstance(stages, list) or not stages:
        raise ManifestError(manifest, f"{where}.stages", f"a pipeline needs a non-empty list of stages; got "
                            f"{type(stages).__name__ if stages is not None else 'nothing'}")
    frameworks = known_frameworks()
    specs: list[StageSpec] = []
    seen: dict[str, int] = {}
    for k, entry in enumerate(stages):
        at = f"{where}.stages[{k}]"
        if not isinstance(entry, dict):
            raise ManifestError(manifest, at, f"a stage is a mapping with name and framework; got "
                                f"{type(entry).__name__}")
        extra = sorted(set(entry) - SPEC_FIELDS)
        if extra:
            raise ManifestError(manifest, f"{at}.{extra[0]}", f"unknown key; a stage has "
                                f"{', '.join(f.name for f in fields(StageSpec))}")
        name, framework = entry.get("name"), entry.get("framework")
        if not isinstance(name, str) or not name.strip():
            raise ManifestError(manifest, f"{at}.name", "every stage needs a name (named in errors and records)")
        if name in seen:
            raise ManifestError(manifest, f"{at}.name", f"duplicate stage name {name!r} (also stages[{seen[name]}])")
        seen[name] = k
        if not isinstance(framework, str) or framework not in frameworks:
            raise ManifestError(manifest, f"{at}.framework", f"unknown stage framework {framework!r}; expected a "
                                f"built-in stage or a predictor: {', '.join(frameworks)}")
        for key, high in (("workers", numbers.MAX_WORKERS), ("max_visits", MAX_VISITS),
                          ("threads", numbers.MAX_WORKERS)):
            if key in entry and (key != "threads" or entry[key] is not None):
                if not _whole(entry[key]):  # 2.0 workers is a typo, not two
                    raise numbers.manifest(manifest, f"{at}.{key}").fail(f"must be a whole number, got "
                                                                         f"{entry[key]!r}")
                numbers.check(entry[key], numbers.manifest(manifest, f"{at}.{key}"), integer=True, minimum=1,
                              maximum=high, high_why=_WHY[key])
        t = numbers.check(entry.get("timeout_s", 600.0), numbers.manifest(manifest, f"{at}.timeout_s"), minimum=0,
                          above=True, maximum=numbers.MAX_TIMEOUT_S, unit=" s", high_why="a week")
        options = entry.get("options") or {}
        if not isinstance(options, dict):
            raise ManifestError(manifest, f"{at}.options", f"expected a mapping; got {type(options).__name__}")
        model = entry.get("model")
        if model is not None and not isinstance(model, dict):
            raise ManifestError(manifest, f"{at}.model", f"expected a mapping (graph_path, ...); got "
                                f"{type(model).__name__}")
        route = options.get("route_to")
        if route is not None and route not in seen:
            raise ManifestError(manifest, f"{at}.options.route_to", f"{route!r} is not this stage or an earlier "
                                f"one ({', '.join(seen)}); an item can only go back")
        for hook in ("before", "after"):
            if entry.get(hook) is not None and not isinstance(entry[hook], str):
                raise ManifestError(manifest, f"{at}.{hook}", f"a hook is Python source defining {hook}(ctx, item)")
        specs.append(StageSpec(name=name, framework=framework, options=dict(options), model=model,
                               workers=entry.get("workers", 1), timeout_s=float(t),
                               max_visits=entry.get("max_visits", 1), before=entry.get("before"),
                               after=entry.get("after"), threads=entry.get("threads")))
    return specs


CHAT_FRAMEWORKS = ("openai", "transformers", "vllm")  # the stages that generate: what --endpoint sends elsewhere


def endpoint_stages(loaded: Any, endpoints: list[str]) -> Any:
    """A pipeline run's manifest with every generating stage (framework openai, transformers or vllm) made an
    ``openai`` stage at ``endpoints`` (``--endpoint``), keeping its model folder (the tokenizer's, where a server
    returns text only), its generation settings and its turn options; the other stages stay as they are. A pipeline
    with no such stage is refused naming the field."""
    from mlharness.kinds.pipeline.predictor_stage import TURN_OPTIONS
    from mlharness.predictors.openai.options import KNOWN_OPTIONS

    m = loaded.model
    params = dict(m.inputs[0].parameters)
    stages = [dict(s) for s in params.get("stages") or []]
    chosen = [s for s in stages if isinstance(s, dict) and s.get("framework") in CHAT_FRAMEWORKS]
    if not chosen:
        raise ManifestError(loaded.path, "inputs[0].parameters.stages", f"--endpoint sends a pipeline's generating "
                            f"stages to the servers, and this one has none (no stage of framework "
                            f"{', '.join(CHAT_FRAMEWORKS)})")
    for stage in chosen:
        options = {k: v for k, v in (stage.get("options") or {}).items() if k in KNOWN_OPTIONS or k in TURN_OPTIONS}
        stage.update(framework="openai", options={**options, "endpoints": list(endpoints)})
    first = m.inputs[0].model_copy(update={"parameters": {**params, "stages": stages}})
    return replace(loaded, model=m.model_copy(update={"inputs": [first, *m.inputs[1:]]}))
