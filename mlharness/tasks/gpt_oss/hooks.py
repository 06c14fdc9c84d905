"""What the gpt-oss-120b dataset manifests' hooks call: the data file of a run, from --dataset-path or the
synthetic set in the cache. An accuracy run reads the accuracy set, a performance run (and TEST09) the
performance set; the ``gpt_oss_compliance`` dataset manifest reads the GPQA set of TEST07 in either mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.tasks.generative import dataset_root
from mlharness.tasks.gpt_oss.dataset import ACCURACY_FILE, PERFORMANCE_FILE, GptOssData, data_file
from mlharness.tasks.gpt_oss.synth import ensure_synthetic_gpt_oss, synthetic_dir


def gpt_oss_dataset(ctx: dict[str, Any]) -> GptOssData:
    """For the dataset manifest's ``init``: ``dataset_attributes.file`` when set, else the accuracy or the
    performance file by the run's mode. Sets ``ctx["dataset_path"]`` (the data set's root folder) for the
    accuracy metric."""
    attrs = ctx.get("dataset_attributes") or {}
    name = str(attrs.get("file") or (ACCURACY_FILE if ctx.get("mode") == "accuracy" else PERFORMANCE_FILE))
    root = dataset_root(ctx, "synthetic_gpt_oss", lambda: ensure_synthetic_gpt_oss(synthetic_dir()),
                        f"gpt-oss-120b needs --dataset-path: the folder of the mlperf_gpt_oss download holding {name} "
                        f"(see docs/llm.md)")
    path = data_file(root, name)
    data = GptOssData(path)
    ctx["dataset_path"] = str(Path(root).expanduser())  # the folder, or the file given (the metric finds the root)
    return data
