"""What the llama3.1-8b dataset manifest's hooks call: the dataset of a run, from --dataset-path or the synthetic
set in the cache."""

from __future__ import annotations

from typing import Any

from mlharness.tasks.cnndm.dataset import DATASET_FILE, CnnDm, dataset_file
from mlharness.tasks.cnndm.synth import ensure_synthetic_cnndm, synthetic_dir
from mlharness.tasks.generative import hook_dataset


def cnndm_dataset(ctx: dict[str, Any]) -> CnnDm:
    """For the dataset manifest's ``init``: the file named by ``dataset_attributes.file`` in ``ctx["dataset_path"]``
    or, for manifests whose ``attributes.synthetic_cnndm`` is set and no path was given, the synthetic set in the
    cache. Sets ``ctx["dataset_path"]`` (the folder) for the accuracy metric."""
    return hook_dataset(ctx, DATASET_FILE, "synthetic_cnndm", lambda: ensure_synthetic_cnndm(synthetic_dir()),
                        "llama3.1-8b needs --dataset-path: a folder holding {name} (the MLCommons R2 download of the "
                        "CNN/DailyMail validation set, see docs/llm.md)", dataset_file, CnnDm)
