"""What the deepseek-r1 dataset manifest's hooks call: the dataset of a run, from --dataset-path or the synthetic
set in the cache."""

from __future__ import annotations

from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.deepseek_r1.dataset import DATASET_FILE, DeepSeekR1Data, dataset_file
from mlharness.tasks.deepseek_r1.synth import ensure_synthetic_deepseek, synthetic_dir


def deepseek_r1_dataset(ctx: dict[str, Any]) -> DeepSeekR1Data:
    """For the dataset manifest's ``init``: the dataset pickle in ``ctx["dataset_path"]`` or, for manifests whose
    ``attributes.synthetic_deepseek_r1`` is set and no path was given, the synthetic set in the cache."""
    attrs = ctx.get("dataset_attributes") or {}
    name = str((ctx.get("attributes") or {}).get("dataset_file") or attrs.get("file") or DATASET_FILE)
    root = ctx.get("dataset_path")
    if not root:
        if not (ctx.get("attributes") or {}).get("synthetic_deepseek_r1"):
            raise DatasetError(f"deepseek-r1 needs --dataset-path: a folder holding {name} (the MLCommons R2 "
                               f"download, see docs/llm.md)")
        root = ensure_synthetic_deepseek(synthetic_dir())
    path = dataset_file(root, name)
    data = DeepSeekR1Data(path)
    ctx["dataset_path"] = str(path.parent)
    return data
