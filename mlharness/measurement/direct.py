"""A model driven directly, without LoadGen: its manifest loaded, its hooks, dataset, predictor and pre-processed
samples in RAM. ``parity`` and the benchmarks (``bench``, ``bench_generate``) time or compare the model through
it, beside the same model under LoadGen."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mlharness.loadgen.qsl import SampleLoader, SampleStore
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import load_manifest
from mlharness.predictors import FRAMEWORK_MODULES, PREDICTORS
from mlharness.run.context import build_context, sample_count
from mlharness.run.factory import (
    check_framework_version,
    make_predictor,
    resolve_model_file,
    resolve_weights_file,
)


class DirectModel:
    """A manifest's model, its predictor and its samples, called without LoadGen."""

    def __init__(self, ref: str, dataset_path: str | None = None, count: int | None = None, batch: int = 8,
                 device: str = "cpu", threads: int | None = None, scenario: str = "Offline",
                 files: tuple[Path | None, Path | None] | None = None, mark: Callable[[str], None] | None = None):
        """``files``: the model and weights files, resolved by the caller (else here). ``mark(step)`` is called as
        each step ends: 'manifest' (manifest, context, hooks, dataset size), 'framework' (the predictor's module
        and its framework imported), 'model' (the predictor made and its model loaded)."""
        mark = mark or (lambda step: None)
        self.ref = ref
        self.loaded = load_manifest(ref)
        self.ctx = build_context(self.loaded, batch, scenario=scenario, mode="performance", device=device,
                                 dataset_path=dataset_path, count=count)
        self.hooks = HookSet(self.loaded, self.ctx)
        self.total = sample_count(self.hooks, count, self.ctx)
        check_framework_version(self.loaded, ignore=False)
        mark("manifest")
        framework = self.loaded.model.framework.name
        PREDICTORS.get(framework)
        if framework in FRAMEWORK_MODULES:  # imported by the predictor when it loads: timed on its own here
            importlib.import_module(FRAMEWORK_MODULES[framework])
        mark("framework")
        model_file, weights_file = files or (resolve_model_file(self.loaded), resolve_weights_file(self.loaded))
        self.predictor = make_predictor(self.loaded, model_file, batch, device=device, threads=threads,
                                        weights_file=weights_file)
        mark("model")
        self.store = SampleStore(self.total, len(self.loaded.model.inputs))
        self.loader = SampleLoader(self.hooks, self.ctx, self.store)

    def load(self, n: int | None = None) -> int:
        n = min(self.total, n or self.total)
        self.loader.load(list(range(n)))
        return n

    def batch(self, indices: np.ndarray) -> list[np.ndarray]:
        return self.store.gather(indices)

    def outputs(self, indices: np.ndarray) -> list[np.ndarray]:
        batch = self.store.gather(indices)
        run = self.predictor.predict
        if "predict" in self.hooks:
            return list(self.hooks.call("predict", self.ctx, run, batch))
        return list(run(batch))

    def close(self) -> None:
        self.predictor.close()
