"""A model driven directly, without LoadGen: its manifest loaded, its hooks, dataset, predictor and pre-processed
samples in RAM. ``parity`` and the benchmarks (``bench``, ``bench_generate``) time or compare the model through
it, beside the same model under LoadGen."""

from __future__ import annotations

import numpy as np

from mlharness.loadgen.qsl import SampleLoader, SampleStore
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import load_manifest
from mlharness.run.context import build_context, sample_count
from mlharness.run.factory import check_framework_version, make_predictor, resolve_model_file


class DirectModel:
    """A manifest's model, its predictor and its samples, called without LoadGen."""

    def __init__(self, ref: str, dataset_path: str | None = None, count: int | None = None, batch: int = 8,
                 device: str = "cpu", threads: int | None = None, scenario: str = "Offline"):
        self.ref = ref
        self.loaded = load_manifest(ref)
        self.ctx = build_context(self.loaded, batch, scenario=scenario, mode="performance", device=device,
                                 dataset_path=dataset_path, count=count)
        self.hooks = HookSet(self.loaded, self.ctx)
        self.total = sample_count(self.hooks, count, self.ctx)
        check_framework_version(self.loaded, ignore=False)
        self.predictor = make_predictor(self.loaded, resolve_model_file(self.loaded), batch, device=device,
                                        threads=threads)
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
