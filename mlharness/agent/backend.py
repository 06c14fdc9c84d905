"""What an agent serves: a manifest's predictor, with or without the manifest's hooks.

``hooks="harness"``: the model as the manifest declares it. Requests carry the pre-processed input tensors (batch
axis first), responses carry the raw model outputs; the harness runs the hooks.

``hooks="agent"``: the whole timed path of the manifest runs here, as the Network division asks. Requests carry
only LoadGen sample indices (input ``sample_index``, INT64 ``[n]``) and the response is one BYTES element per
sample (output ``response``): exactly the bytes LoadGen logs. The LoadGen node's QSL load/unload reach the agent
as ModelInfer requests with the parameter ``mlharness_qsl`` set to ``load`` or ``unload`` (untimed): the agent then
runs the dataset's ``load`` hook and ``preprocess`` for those indices, as a local run does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.agent.spans import StageCollector
from mlharness.agent.tensors import DYNAMIC, datatype_of, per_sample_bytes, spec_shape
from mlharness.errors import AgentError

log = logging.getLogger(__name__)

SAMPLE_INDEX = "sample_index"
RESPONSE = "response"
QSL_PARAMETER = "mlharness_qsl"
HOOKS_MODES = ("harness", "agent")
_MIN_MESSAGE = 4 << 20
_MAX_MESSAGE = (1 << 31) - 1
_DYNAMIC_MESSAGE = 1 << 30
_REQUEST_SAMPLES = 1024  # the largest request the size limits plan for, when the batch size is smaller


@dataclass
class TensorMeta:
    name: str
    datatype: str
    dims: list[int] | None  # one sample, no batch axis; None: not declared (any shape)

    @property
    def shape(self) -> list[int]:
        """The protocol shape: batch axis first; an undeclared shape is reported as one dynamic axis."""
        return [DYNAMIC, *(self.dims if self.dims is not None else [])]


class ModelBackend:
    """Loads the manifest's predictor once; ``run`` is thread-safe (called by the batcher's workers)."""

    def __init__(self, manifest: str | Path = "demo", framework: str | None = None, hooks: str = "harness",
                 dataset_path: str | None = None, count: int | None = None, device: str = "cpu",
                 threads: int | None = None, max_batchsize: int | None = None, scenario: str = "Offline",
                 model_name: str | None = None, ignore_framework_version: bool = False):
        from mlharness.manifest.loader import load_manifest
        from mlharness.run.context import build_context, resolve_load_workers, sample_count
        from mlharness.run.factory import check_framework_version, make_predictor, resolve_model_file

        if hooks not in HOOKS_MODES:
            raise AgentError(f"--hooks must be one of {', '.join(HOOKS_MODES)}, got '{hooks}'")
        self.hooks_mode = hooks
        loaded = load_manifest(manifest, None, framework)
        m = loaded.model
        if m.framework.name == "remote":
            raise AgentError(f"{loaded.path}: an agent cannot serve a 'remote' manifest (it would call itself)")
        self.name = model_name or m.name
        self.version = m.version
        self.framework = m.framework.name
        self.max_batchsize = max_batchsize or m.batching.for_scenario(scenario)
        self.framework_version = check_framework_version(loaded, ignore_framework_version)
        self._specs_in = [i.model_dump() for i in m.inputs]
        self._specs_out = [o.model_dump() for o in m.outputs]
        self.total = 0
        self._warmup = m.framework.warmup
        self._warmed = False
        ctx = build_context(loaded, self.max_batchsize, scenario=scenario, mode="performance", device=device,
                            dataset_path=dataset_path, count=count)
        if hooks == "agent":
            from mlharness.loadgen.batch import Pipeline
            from mlharness.loadgen.qsl import SampleLoader, SampleStore
            from mlharness.manifest.hooks import HookSet
            from mlharness.manifest.schema import numpy_dtype

            self.hookset = HookSet(loaded, ctx)
            self.total = sample_count(self.hookset, count, ctx)
            self.predictor = make_predictor(loaded, resolve_model_file(loaded), self.max_batchsize, device=device,
                                            threads=threads)
            self.store = SampleStore(self.total, len(m.inputs))
            self.loader = SampleLoader(self.hookset, ctx, self.store, resolve_load_workers(None, loaded))
            # the stage spans of each batch, returned to traced requests (mlharness.agent.spans)
            self.stages: StageCollector | None = StageCollector()
            self.pipeline = Pipeline(self.predictor, self.hookset, ctx, self.store,
                                     numpy_dtype(m.response.element_type), tracer=self.stages)
            if "before_postprocess" in self.hookset:
                self.hookset.call("before_postprocess", ctx)
            self.inputs = [TensorMeta(SAMPLE_INDEX, "INT64", [])]
            self.outputs = [TensorMeta(RESPONSE, "BYTES", [])]
        else:
            self.hookset = None
            self.stages = None
            self.predictor = make_predictor(loaded, resolve_model_file(loaded), self.max_batchsize, device=device,
                                            threads=threads)
            self.inputs = [self._meta(s, f"input_{k}") for k, s in enumerate(self._specs_in)]
            self.outputs = [self._meta(s, f"output_{k}") for k, s in enumerate(self._specs_out)]
        self.ctx = ctx

    @staticmethod
    def _meta(spec: dict[str, Any], default_name: str) -> TensorMeta:
        return TensorMeta(spec.get("name") or default_name, datatype_of(spec.get("element_type", "float32")),
                          spec_shape(spec.get("shape")) if spec.get("shape") is not None else None)

    @property
    def platform(self) -> str:
        return f"mlharness_{self.framework}" + ("_hooks" if self.hooks_mode == "agent" else "")

    def message_limits(self) -> tuple[int, int]:
        """(receive, send) byte limits from the model's shapes: the largest request the agent plans for."""
        samples = max(self.max_batchsize, _REQUEST_SAMPLES)
        if self.hooks_mode == "agent":
            return _MIN_MESSAGE + 8 * samples, _DYNAMIC_MESSAGE

        def limit(specs: list[dict[str, Any]]) -> int:
            each = per_sample_bytes(specs)
            if each is None:
                return _DYNAMIC_MESSAGE
            return min(_MAX_MESSAGE, max(_MIN_MESSAGE, each * samples + (1 << 20)))

        return limit(self._specs_in), limit(self._specs_out)

    # -- the timed path ----------------------------------------------------------------------------------------
    def run(self, inputs: list[np.ndarray]) -> list[Sequence[Any]]:
        if self.hooks_mode == "harness":
            return self.predictor.predict(inputs)
        indices = np.asarray(inputs[0], dtype=np.int64).reshape(-1)
        buf, offsets = self.pipeline.run(indices)
        data = buf.tobytes()
        return [[data[offsets[i]:offsets[i + 1]] for i in range(len(indices))]]

    def check_indices(self, indices: np.ndarray) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(indices) and (indices.min() < 0 or indices.max() >= self.total):
            raise AgentError(f"sample indices must be in [0, {self.total}) (the agent's dataset has {self.total} "
                             f"samples; start it with a larger --count?)", "OUT_OF_RANGE")
        return indices

    # -- QSL control (hooks="agent") ---------------------------------------------------------------------------
    def qsl(self, action: str, indices: np.ndarray) -> None:
        if self.hooks_mode != "agent":
            raise AgentError(f"'{QSL_PARAMETER}' requests need an agent started with --hooks agent",
                             "FAILED_PRECONDITION")
        indices = self.check_indices(indices)
        if action == "load":
            self.loader.load(indices.tolist())
            if not self._warmed and self._warmup and len(indices):
                # warm up on real samples before any timed request, as a local run does
                self._warmed = True
                self.pipeline.warmup(indices[: self.max_batchsize], self._warmup)
            log.info("loaded %d samples", len(indices))
        elif action == "unload":
            self.loader.unload(indices.tolist())
        else:
            raise AgentError(f"unknown {QSL_PARAMETER} action '{action}' (load or unload)", "INVALID_ARGUMENT")

    def close(self) -> None:
        try:
            if self.hookset is not None:
                for name in ("after_preprocess", "after_postprocess"):
                    if name in self.hookset:
                        self.hookset.call(name, self.ctx)
        finally:
            self.predictor.close()

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "version": self.version, "framework": self.framework,
                "framework_version": self.framework_version, "hooks": self.hooks_mode,
                "max_batchsize": self.max_batchsize, "samples": self.total or None,
                "inputs": [(t.name, t.datatype, t.shape) for t in self.inputs],
                "outputs": [(t.name, t.datatype, t.shape) for t in self.outputs]}
