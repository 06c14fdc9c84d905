"""Accuracy metrics: turn ``mlperf_log_accuracy.json`` into the official figure and the text of accuracy.txt."""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import AccuracyError
from mlharness.fileguard import DATA_FILE_LIMIT, read_json


@dataclass
class AccuracyResult:
    text: str  # exactly what the official accuracy script prints (the content of accuracy.txt)
    value: float  # the primary figure, as the official script reports it (percent for top-1, F1, mean DICE)
    name: str  # e.g. "top1", "f1", "mean_dice"
    details: dict[str, Any] = field(default_factory=dict)
    # False when the log covers only part of the dataset and the text is a labelled development figure that the
    # official script would not print (a KiTS19 subset); SQuAD's official line scores every question anyway.
    official: bool = True


# The official accuracy metric of each MLPerf model (``mlperf.model``, as mlperf.conf names it) that a task ports.
# A figure is recorded as official only from that metric, for a manifest that names that model (see
# :func:`official_figure`): a generic metric, or a task's metric on a model that names no MLPerf benchmark (the
# demo), is a figure, not an official one.
OFFICIAL_METRICS = {
    "resnet50": "imagenet_top1",
    "retinanet": "openimages_map",
    "bert": "squad_v1.1",
    "3d-unet": "kits19_dice",
    "gptj": "cnndm_rouge",
    "llama3_1-8b": "cnndm_rouge",
    "llama3_1-8b-edge": "cnndm_rouge",
    "llama2-70b": "openorca_rouge",
    "deepseek-r1": "deepseek_r1_accuracy",
    "gpt-oss-120b": "gpt_oss_exact_match",
    "stable-diffusion-xl": "coco_t2i",
    "whisper": "whisper_wer",
    "yolo": "coco_map",
    "qwen3-vl-235b-a22b": "qwen3_vl_f1",
    "rgat": "igbh_accuracy",
    "e2e-rag-qna": "e2e_rag_qna",
    "e2e-rag-db": "e2e_rag_db",
}


def official_figure(result: AccuracyResult, metric: str, mlperf_model: str | None) -> bool:
    """Whether a run records ``result`` as official: the benchmark's own metric (:data:`OFFICIAL_METRICS`) over
    what its official script scores (``result.official`` is False for a labelled subset)."""
    return bool(result.official) and mlperf_model is not None and OFFICIAL_METRICS.get(mlperf_model) == metric


@dataclass
class AccuracyContext:
    """What a metric may use besides the log: the dataset's location and size, the manifest's options."""

    dataset_path: Path | None
    count: int
    options: dict[str, Any]
    # the element type the manifest declares for responses (int32, int64, ...): what the accuracy log holds
    response_dtype: str | None = None


class AccuracyMetric(abc.ABC):
    name = "metric"

    def preflight(self, options: dict[str, Any]) -> None:  # noqa: B027 - a no-op unless the metric needs more
        """Check, before a run that will score with this metric loads its model, what scoring needs beyond the log
        (an outside environment, say), so a missing piece fails in seconds rather than after every sample is
        played. Raises an MLHarnessError saying what is missing and how to get it; ``options`` are the
        manifest's ``accuracy.options``."""

    @abc.abstractmethod
    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult: ...


@dataclass(frozen=True)
class LogEntry:
    """One entry of an mlperf_log_accuracy.json, its response bytes decoded only on demand.

    The official accuracy scripts read ``qsl_idx`` and ``data`` and nothing else (an entry without ``seq_id`` is
    fine), and accuracy-imagenet.py skips a repeated sample before it looks at the response; decoding lazily lets
    each metric accept exactly what its official script accepts."""

    position: int  # index in the json array
    qsl_idx: int
    raw: dict[str, Any]

    @property
    def where(self) -> str:
        seq = self.raw.get("seq_id")
        return f"entry {self.position} ({'' if seq is None else f'seq_id {seq}, '}qsl_idx {self.qsl_idx})"

    def data(self, path: Path) -> bytes:
        value = self.raw.get("data")
        if not isinstance(value, str):
            raise AccuracyError(f"{path}: {self.where} has no hex 'data' string")
        try:
            return bytes.fromhex(value)
        except ValueError as e:
            raise AccuracyError(f"{path}: {self.where}: 'data' is not hex: {e}") from e


ACCURACY_LOG_LIMIT = 16 * DATA_FILE_LIMIT


def accuracy_log_entries(path: Path) -> list[LogEntry]:
    """The entries of an mlperf_log_accuracy.json; each must be an object with an integer ``qsl_idx`` (the
    official scripts crash otherwise)."""
    # LoadGen writes every response in hex: the largest logs read here (token ids, boxes, scores of tens of
    # thousands of samples) are hundreds of MiB; the bound only refuses a wrong file (images are read elsewhere)
    entries = read_json(Path(path), "the accuracy log", ACCURACY_LOG_LIMIT, error=AccuracyError)
    if not isinstance(entries, list):
        raise AccuracyError(f"{path}: an accuracy log is a JSON array of entries, found {type(entries).__name__}")
    out = []
    for i, entry in enumerate(entries):
        idx = entry.get("qsl_idx") if isinstance(entry, dict) else None
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise AccuracyError(f"{path}: entry {i} is malformed: expected an object with an integer 'qsl_idx', "
                                f"got {json.dumps(entry)[:120]}")
        out.append(LogEntry(i, idx, entry))
    return out


def read_accuracy_log(path: Path) -> list[tuple[int, int, bytes]]:
    """(seq_id, or the entry's position when it has none; qsl_idx; response bytes) for every entry."""
    return [(int(e.raw.get("seq_id", e.position)), e.qsl_idx, e.data(path)) for e in accuracy_log_entries(path)]


def subset_line(scored: int, total: int, unit: str, figures: str) -> str:
    """The line a development subset gets instead of (SQuAD: besides) the official one.  It starts with
    "subset", so none of the submission checkers' accuracy patterns (anchored at the line start) reads it as
    the benchmark's figure."""
    return f"subset of {scored} of {total} {unit}, not comparable: {figures}\n"
