"""Accuracy logs of a model over a stream, in LoadGen's mlperf_log_accuracy.json layout, outside LoadGen: for the
fixtures the official scripts are run on and for TEST08's reordered or altered logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlharness.tasks.dlrm_v3 import models
from mlharness.tasks.dlrm_v3.jagged import Stream


def predictions(stream: Stream, model: str, seed: int = 0) -> list[np.ndarray]:
    if model == "oracle":
        return [models.predict_oracle(stream, i) for i in range(len(stream))]
    net = models.build_hstu(models.HstuConfig(seed=seed))
    return [models.predict_random(stream, i, net) for i in range(len(stream))]


def write_log(path: Path, rows: list[np.ndarray], qsl: list[int] | None = None) -> Path:
    qsl = list(range(len(rows))) if qsl is None else qsl
    entries = [{"seq_id": i, "qsl_idx": q, "data": r.astype(np.float32).tobytes().hex().upper()}
               for i, (q, r) in enumerate(zip(qsl, rows, strict=True))]
    Path(path).write_text(json.dumps(entries, indent=0))
    return Path(path)


def accuracy_rows(stream: Stream, preds: list[np.ndarray]) -> list[np.ndarray]:
    return [models.answer(stream, i, p, accuracy=True) for i, p in enumerate(preds)]


def performance_rows(stream: Stream, preds: list[np.ndarray], sampled: list[int]) -> list[np.ndarray]:
    return [models.answer(stream, i, preds[i], accuracy=False) for i in sampled]
