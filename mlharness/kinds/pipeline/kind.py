"""The pipeline kind's row: one sample, one item through a list of stages (retrieval, reranking, any predictor),
each with its workers (``sut.py``; docs/pipelines.md); calibrated by playing a few samples together
(``calibrate.py``); its ``type: pipeline`` input names the stages (``input.py``), and its per-stage records get a
report section (``plots.py``)."""

from __future__ import annotations

from typing import Any

from mlharness.errors import ManifestError
from mlharness.kinds.base import Kind, Parts, played_bound, played_calibration
from mlharness.kinds.pipeline import calibrate
from mlharness.kinds.pipeline.input import make_input, stage_specs
from mlharness.kinds.pipeline.sut import PipelineSUT, attach_hooks


def make_sut(p: Parts) -> Any:
    run = p.run
    lanes = getattr(p.predictors[0], "lanes", None)
    if lanes is None:
        raise ManifestError(run.loaded.path, "framework.name", f"response.kind is 'pipeline', but framework "
                            f"'{run.loaded.model.framework.name}' builds no stages; use framework 'pipeline'")
    attach_hooks(lanes, run.hooks)
    p.sut = PipelineSUT(lanes, p.store, run.hooks, run.ctx, p.dtype, outdir=p.outdir, on_failure=p.on_failure)
    return p.sut


def with_endpoints(loaded: Any, endpoints: list[str]) -> Any:
    """--endpoint on a pipeline: its generating stages go to the servers (settings.py)."""
    from mlharness.kinds.pipeline.settings import endpoint_stages

    return endpoint_stages(loaded, endpoints)


KIND = Kind("pipeline", make_input=make_input, check_input=stage_specs, make_sut=make_sut,
            server_bound=played_bound, calibrate=played_calibration(calibrate.for_run), with_endpoints=with_endpoints,
            report="mlharness.kinds.pipeline.plots:section", rows="mlharness.kinds.pipeline.report:stage_rows")
