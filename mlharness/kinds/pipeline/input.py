"""What a ``type: pipeline`` input is: each sample's first item (a dict, from ``preprocess`` at load time,
untimed), which the stages of ``inputs[0].parameters.stages`` (checked by
:func:`mlharness.kinds.pipeline.settings.stage_specs`) carry on; docs/pipelines.md."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlharness.errors import HookError
from mlharness.kinds.pipeline.settings import PIPELINE_INPUT, stage_specs
from mlharness.loadgen.qsl import InputKind

__all__ = ["PIPELINE_INPUT", "make_input", "pipeline_item", "stage_specs"]


def pipeline_item(out: Any, index: int, manifest: str) -> np.ndarray:
    """``preprocess``'s item for sample ``index``, kept as a 0-d object array (the store gathers it like a
    session); its ``index`` key is set to the sample's when the hook left it out (the toy stage and the records
    name samples by it)."""
    if not isinstance(out, dict):
        raise HookError("preprocess", manifest, f"sample {index}: returned {type(out).__name__}; a pipeline input's "
                        "preprocess returns the sample's first item, a dict")
    cell = np.empty((), dtype=object)
    cell[()] = {"index": index, **out}
    return cell


def make_input(ctx: dict[str, Any], manifest: str) -> InputKind:
    return InputKind(sample=lambda out, index: pipeline_item(out, index, manifest))
