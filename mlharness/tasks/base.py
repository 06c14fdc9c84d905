"""Accuracy metrics: turn ``mlperf_log_accuracy.json`` into the official figure and the text of accuracy.txt."""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import AccuracyError


@dataclass
class AccuracyResult:
    text: str  # exactly what the official accuracy script prints (the content of accuracy.txt)
    value: float  # the primary figure, as the official script reports it (percent for top-1, F1, mean DICE)
    name: str  # e.g. "top1", "f1", "mean_dice"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class AccuracyContext:
    """What a metric may use besides the log: the dataset's location and size, the manifest's options."""

    dataset_path: Path | None
    count: int
    options: dict[str, Any]


class AccuracyMetric(abc.ABC):
    name = "metric"

    @abc.abstractmethod
    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult: ...


def read_accuracy_log(path: Path) -> list[tuple[int, int, bytes]]:
    """(seq_id, qsl_idx, response bytes) for every entry of an mlperf_log_accuracy.json."""
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise AccuracyError(f"cannot read accuracy log {path}: {e}") from e
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append((int(entry["seq_id"]), int(entry["qsl_idx"]), bytes.fromhex(entry["data"])))
        except (KeyError, TypeError, ValueError) as e:
            raise AccuracyError(f"{path}: entry {i} is malformed: {e}") from e
    return out
