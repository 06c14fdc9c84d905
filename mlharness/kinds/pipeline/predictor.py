"""``framework: pipeline``: the predictor a pipeline manifest loads through the registry like any other. It reads
its stage list from the manifest's input (``inputs[0].parameters.stages``, checked by
:func:`~mlharness.kinds.pipeline.settings.stage_specs`), builds each stage (a built-in one from
:data:`~mlharness.kinds.pipeline.stage.STAGES`, any other framework through the predictor adapter) and loads it, timed.
The run's SUT (``kinds/pipeline/sut.py``) takes the loaded stages from here; there are no tensors to predict.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.kinds.pipeline.flow import Lane
from mlharness.kinds.pipeline.predictor_stage import predictor_stage
from mlharness.kinds.pipeline.settings import builtin_stages, stage_specs
from mlharness.kinds.pipeline.stage import StageContext
from mlharness.predictors.base import Predictor


class PipelinePredictor(Predictor):
    name = "pipeline"

    def load(self) -> None:
        from mlharness.manifest.assets import cache_dir

        manifest = self.config.manifest_path
        specs = self.config.input_specs
        params = specs[0].get("parameters") if specs else None
        self.specs = stage_specs(params, manifest)
        ctx = StageContext(manifest_dir=Path(manifest).parent if manifest else Path.cwd(), cache_dir=cache_dir(),
                           device=self.config.device, threads=self.config.threads)
        stages = builtin_stages()
        self.lanes: list[Lane] = []
        try:
            for spec in self.specs:
                factory = stages.get(spec.framework, predictor_stage)
                stage = factory(spec, ctx)
                t0 = time.perf_counter()
                stage.load()
                self.lanes.append(Lane(spec, stage, load_s=time.perf_counter() - t0))
        except BaseException:
            self.close()
            raise

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise PredictorError("a pipeline answers through its stages (the pipeline SUT), not one predict call")

    def close(self) -> None:
        for lane in getattr(self, "lanes", []):
            try:
                lane.stage.close()
            except Exception:  # noqa: BLE001 - every stage is closed; the run's result stands
                pass

    def framework_version(self) -> str:
        from mlharness import __version__

        return __version__

    def describe(self) -> dict[str, Any]:
        return {"stages": [{"name": lane.spec.name, "framework": lane.spec.framework, "workers": lane.spec.workers,
                            "load_s": lane.load_s, **lane.stage.describe()} for lane in getattr(self, "lanes", [])]}
