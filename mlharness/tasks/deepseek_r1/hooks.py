"""What the deepseek-r1 dataset manifest's hooks call: the dataset of a run, from --dataset-path or the synthetic
set in the cache."""

from __future__ import annotations

from typing import Any

from mlharness.tasks.deepseek_r1.dataset import DATASET_FILE, DeepSeekR1Data, dataset_file
from mlharness.tasks.deepseek_r1.synth import ensure_synthetic_deepseek, synthetic_dir
from mlharness.tasks.generative import hook_dataset


def deepseek_r1_dataset(ctx: dict[str, Any]) -> DeepSeekR1Data:
    """For the dataset manifest's ``init``: the dataset pickle in ``ctx["dataset_path"]`` or, for manifests whose
    ``attributes.synthetic_deepseek_r1`` is set and no path was given, the synthetic set in the cache."""
    return hook_dataset(ctx, DATASET_FILE, "synthetic_deepseek_r1", lambda: ensure_synthetic_deepseek(synthetic_dir()),
                        "deepseek-r1 needs --dataset-path: a folder holding {name} (the MLCommons R2 download, see "
                        "docs/llm.md)", dataset_file, DeepSeekR1Data)
