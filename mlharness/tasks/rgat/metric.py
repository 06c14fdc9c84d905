"""IGBH accuracy: a port of the official ``graph/R-GAT/tools/accuracy_igbh.py``.

The script loads the paper labels (``node_label_2K.npy``) and ``val_idx.pt`` of ``<dataset>/<size>/processed``,
and for each distinct qsl_idx of the accuracy log (the first occurrence wins) compares the label of paper
``val_idx[qsl_idx]`` with the first element of the response decoded in ``--dtype`` (uint8, as the reference SUT
writes its argmax); it writes ``accuracy={:.3f}%, good={}, total={}`` (100 x the fraction, no newline). The
differences are clean errors where the script would crash (an empty log, a qsl_idx outside val_idx)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult, accuracy_log_entries
from mlharness.tasks.rgat.dataset import SIZES, paper_labels, validation_seeds

DTYPES = {"uint8": np.uint8, "float32": np.float32, "int32": np.int32, "int64": np.int64}  # the script's --dtype


class IgbhAccuracyMetric(AccuracyMetric):
    name = "igbh_accuracy"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        dtype_name = str(ctx.options.get("dtype", "uint8"))
        size = str(ctx.options.get("dataset_size", "tiny"))
        if dtype_name not in DTYPES or size not in SIZES:
            raise AccuracyError(f"igbh_accuracy: dtype '{dtype_name}' (one of {', '.join(DTYPES)}) and "
                                f"dataset_size '{size}' (one of {', '.join(SIZES)})")
        if ctx.dataset_path is None:
            raise AccuracyError("igbh_accuracy needs the dataset path (the IGBH root holding <size>/processed)")
        try:
            labels = paper_labels(ctx.dataset_path, size)
            seeds = validation_seeds(ctx.dataset_path, size)
        except DatasetError as e:
            raise AccuracyError(f"igbh_accuracy: {e}") from e
        entries = accuracy_log_entries(accuracy_log)
        seen: set[int] = set()
        good = total = 0
        for entry in entries:
            idx = entry.qsl_idx
            if idx in seen:
                continue
            seen.add(idx)
            if not 0 <= idx < len(seeds):
                raise AccuracyError(f"igbh_accuracy: qsl_idx {idx} is outside val_idx ({len(seeds)} seeds)")
            data = int(np.frombuffer(entry.data(accuracy_log), DTYPES[dtype_name])[0])
            good += int(labels[seeds[idx]] == data)
            total += 1
        if total == 0:
            raise AccuracyError(f"igbh_accuracy: accuracy log {accuracy_log} has no entries; nothing to score")
        accuracy = good / total
        text = f"accuracy={100.0 * accuracy:.3f}%, good={good}, total={total}"
        return AccuracyResult(text=text, value=100.0 * accuracy, name="acc", details={"good": good, "total": total})
