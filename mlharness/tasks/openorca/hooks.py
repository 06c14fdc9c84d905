"""What the OpenOrca dataset manifest's hooks call: the dataset of a run, from --dataset-path or the synthetic set
in the cache."""

from __future__ import annotations

from typing import Any

from mlharness.tasks.generative import hook_dataset
from mlharness.tasks.openorca.dataset import DATASET_FILE, OpenOrca, dataset_file
from mlharness.tasks.openorca.synth import ensure_synthetic_openorca, synthetic_dir


def openorca_dataset(ctx: dict[str, Any]) -> OpenOrca:
    """For the dataset manifest's ``init``: the pickle named by ``dataset_attributes.file`` in
    ``ctx["dataset_path"]`` or, for manifests whose ``attributes.synthetic_openorca`` is set and no path was given,
    the synthetic set in the cache. Sets ``ctx["dataset_path"]`` (the folder) for the accuracy metric."""
    return hook_dataset(ctx, DATASET_FILE, "synthetic_openorca", lambda: ensure_synthetic_openorca(synthetic_dir()),
                        "llama2-70b needs --dataset-path: a folder holding {name} (the MLCommons R2 download of the "
                        "OpenOrca set, see docs/llm.md)", dataset_file, OpenOrca)
