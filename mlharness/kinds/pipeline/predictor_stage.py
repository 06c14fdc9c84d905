"""Any predictor mlharness has, as a pipeline stage: a stage whose ``framework`` is not a built-in stage builds that
framework's predictor (the registry a normal run uses, with the stage's ``options`` and ``model``) and calls it
once per sample.

- A predictor with ``chat_engine()`` (transformers, openai, vllm, session-oracle): the stage sends
  ``item["messages"]`` (which its ``before`` hook builds) as one turn through the engine, on an asyncio loop of the
  stage's own (a thread; the stage's workers share it, so a served engine sees their turns concurrently), and puts
  ``answer`` (the text) and, where the engine counted them, ``n_tokens`` in the item. A ``before`` hook that sets
  ``item["skip_call"]`` has the stage pass the item on without a call (its ``after`` hook sees the flag).
- A tensor predictor (onnxruntime, pytorch, remote, echo): ``before`` puts ``item["inputs"]`` (a list of arrays
  with a batch of 1); the stage calls ``predict`` and puts ``item["outputs"]``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import threading
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import ManifestError
from mlharness.kinds.pipeline.stage import Item, StageContext, StageError, StageSpec
from mlharness.predictors.base import PredictorConfig


def stage_model_path(spec: StageSpec, ctx: StageContext) -> str | None:
    """The stage's model file: ``model.graph_path`` beside the manifest, or written by ``model.generator``
    (``module:function`` called with the path in the cache it writes to) when the file is not there."""
    model = spec.model or {}
    graph = model.get("graph_path")
    if graph is None:
        return None
    path = Path(graph) if Path(graph).is_absolute() else Path(ctx.manifest_dir) / graph
    if not path.exists() and model.get("generator"):
        module, _, name = str(model["generator"]).partition(":")
        target = Path(ctx.cache_dir) / "generated" / spec.name / Path(graph).name
        target.parent.mkdir(parents=True, exist_ok=True)
        path = Path(getattr(importlib.import_module(module), name)(target))
    return str(path)


def stage_generation(spec: StageSpec, generation: Any) -> Any:
    """The stage's ``options.generation`` (the manifest ``generation`` section's fields: max_new_tokens,
    min_new_tokens, do_sample, temperature, ...) as the predictor's GenerationConfig; a field the section does not
    have, or a value out of range, names the stage's option."""
    from pydantic import ValidationError

    from mlharness.manifest.schema import GenerationSpec
    from mlharness.predictors.generative import generation_config

    if generation is None:
        return None
    if not isinstance(generation, dict):
        raise StageError(spec.name, f"options.generation: expected a mapping of generation settings; got "
                         f"{type(generation).__name__}")
    try:
        return generation_config(GenerationSpec(**generation))
    except ValidationError as e:
        first = e.errors()[0]
        raise StageError(spec.name, f"options.generation.{'.'.join(map(str, first['loc']))}: {first['msg']}") from e


TURN_OPTIONS = ("max_tokens", "extra_body")  # a chat stage's per-turn request fields (options.max_tokens, ...)


class PredictorStage:
    def __init__(self, spec: StageSpec, ctx: StageContext):
        from mlharness.predictors import PREDICTORS

        self.spec, self.ctx, self.name = spec, ctx, spec.name
        self.cls = PREDICTORS.get(spec.framework)
        generation = spec.options.get("generation")
        # a chat turn's max_tokens: options.max_tokens, else the generation settings' max_new_tokens, else 1024
        self.max_tokens = int(generation.get("max_new_tokens", 1024)) if isinstance(generation, dict) else 1024
        self.predictor: Any = None
        self.engine: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turns = 0

    def load(self) -> None:
        options = dict(self.spec.options)
        generation = options.pop("generation", None)
        for key in TURN_OPTIONS:  # the stage's, for each chat turn it sends; no option of the predictor
            options.pop(key, None)
        config = PredictorConfig(model_path=stage_model_path(self.spec, self.ctx), input_names=[], output_names=[],
                                 device=self.ctx.device, threads=self.ctx.threads, options=options,
                                 model_name=self.spec.name, generation=stage_generation(self.spec, generation))
        self.predictor = self.cls(config)
        self.predictor.load()
        if callable(getattr(self.predictor, "chat_engine", None)):
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name=f"mlharness-stage-{self.name}-loop",
                             daemon=True).start()
            self.engine = asyncio.run_coroutine_threadsafe(self._make_engine(), self._loop).result(60)

    async def _make_engine(self) -> Any:
        return self.predictor.chat_engine()  # on the loop: an engine binds its connections to it

    def run(self, item: Item) -> Item:
        if self.engine is not None:
            return self._chat(item)
        inputs = item.get("inputs")
        if not isinstance(inputs, list | tuple):
            raise StageError(self.name, "a tensor stage needs item['inputs'], a list of arrays (batch of 1), which "
                             "its before hook builds")
        item["outputs"] = self.predictor.predict([np.asarray(x) for x in inputs])
        return item

    def _chat(self, item: Item) -> Item:
        from mlharness.kinds.sessions.engine import TurnRequest

        if item.get("skip_call"):  # the before hook says this visit needs no call (a loop's round without one)
            return item
        messages = item.get("messages")
        if not isinstance(messages, list) or not messages:
            raise StageError(self.name, "a chat stage needs item['messages'] (the turn's chat messages), which its "
                             "before hook builds")
        self._turns += 1
        request = TurnRequest(session_id=str(item.get("index", self._turns)), turn=0, messages=messages,
                              tools=list(item.get("tools") or []),
                              max_tokens=int(self.spec.options.get("max_tokens", self.max_tokens)),
                              extra_body=dict(self.spec.options.get("extra_body") or {}))
        future = asyncio.run_coroutine_threadsafe(self.engine.answer(request, _NoTiming()), self._loop)
        try:  # bounded: a turn past the stage's deadline is cancelled, so it frees its engine slot and this thread
            answer = future.result(self.spec.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise StageError(self.name, f"the chat turn took over {self.spec.timeout_s:g} s (timeout_s); it was "
                             "cancelled") from None
        item["answer"] = answer.content or ""
        if answer.completion_tokens is not None:
            item["n_tokens"] = int(answer.completion_tokens)
        return item

    def close(self) -> None:
        if self._loop is not None:
            if self.engine is not None:
                try:
                    asyncio.run_coroutine_threadsafe(self.engine.aclose(), self._loop).result(30)
                except Exception:  # noqa: BLE001 - closing is best effort; the results stand
                    pass
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self.predictor is not None:
            self.predictor.close()

    def describe(self) -> dict[str, Any]:
        facts = {"framework": self.spec.framework}
        if self.predictor is not None:
            facts["framework_version"] = self.predictor.framework_version()
        return facts


class _NoTiming:
    def first(self) -> None:
        pass


def predictor_stage(spec: StageSpec, ctx: StageContext) -> PredictorStage:
    try:
        return PredictorStage(spec, ctx)
    except Exception as e:  # an unknown or uninstalled framework: the manifest's stage is named
        raise ManifestError(str(ctx.manifest_dir), f"stage {spec.name!r}.framework", str(e)) from e
