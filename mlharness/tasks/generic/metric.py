"""Generic accuracy metrics: a labels file beside the dataset and the responses of an accuracy log, for any model.

Every metric reads each qsl_idx once (the first response wins, as the official scripts do), resolves its
``labels`` option (default ``labels.txt``) against the dataset path, decodes responses in ``dtype`` (default
float32) and prints one accuracy.txt line in the official scripts' style:

- ``top1``/``top5``: a one-value response is the predicted class; a longer one holds a score per class (the
  highest wins; ``label_offset`` is added to its position, e.g. -1 when the scores start with a background class).
  ``accuracy=76.000%, good=38, total=50`` / ``top5_accuracy=...``, like ``accuracy-imagenet.py``.
- ``exact_match``/``token_f1``: the response is UTF-8 text, each line of the labels file one answer; normalised
  and scored as the official SQuAD v1.1 script: ``{"exact_match": 50.0, "f1": 66.667}``. Token ids (a token
  model's responses) are decoded with the ``tokenizer`` option's folder, and refused without one (:mod:`.text`).
- ``mean_absolute_error``/``mean_squared_error``: one number per sample: ``mae=0.125000, total=8``.
- ``detection_map``: float32 7-tuples per box (as the detection benchmarks) against a COCO-format
  ``annotations`` file, through the detection tasks' COCO evaluation: ``mAP=37.550%``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import (
    AccuracyContext,
    AccuracyMetric,
    AccuracyResult,
    LogEntry,
    accuracy_log_entries,
)
from mlharness.tasks.generic import dataset
from mlharness.tasks.generic.rag import RagQa  # noqa: F401 - registered from here, as every metric of the task
from mlharness.tasks.generic.text import texts


def _path(option: Any, ctx: AccuracyContext) -> Path:
    p = Path(str(option)).expanduser()
    return p if p.is_absolute() or ctx.dataset_path is None else Path(ctx.dataset_path) / p


def _labels(metric: str, ctx: AccuracyContext, whole_lines: bool = False) -> tuple[Path, list[str]]:
    path = _path(ctx.options.get("labels", "labels.txt"), ctx)
    if not path.is_file():
        raise AccuracyError(f"{metric}: labels file {path} not found (accuracy option 'labels', relative to the "
                            f"dataset path {ctx.dataset_path})")
    files = None
    if ctx.dataset_path is not None and Path(ctx.dataset_path).is_dir():
        try:
            files = [p.name for p in dataset.list_files(ctx.dataset_path)]
        except DatasetError:
            files = None
    try:
        return path, dataset.read_labels(path, files, whole_lines)
    except DatasetError as e:
        raise AccuracyError(f"{metric}: {e}") from e


def _responses(metric: str, log: Path, n_labels: int, labels: Path,
               entries: list[LogEntry] | None = None) -> list[tuple[int, bytes]]:
    """(qsl_idx, response bytes) of each distinct sample, the first response of a repeated one."""
    entries = accuracy_log_entries(log) if entries is None else entries
    if not entries:
        raise AccuracyError(f"{metric}: accuracy log {log} has no entries; nothing to score")
    seen: set[int] = set()
    out = []
    for e in entries:
        if e.qsl_idx in seen:
            continue
        if not 0 <= e.qsl_idx < n_labels:
            raise AccuracyError(f"{metric}: {log}: {e.where} is outside the {n_labels} labels of {labels}")
        seen.add(e.qsl_idx)
        out.append((e.qsl_idx, e.data(log)))
    return out


def _decode(metric: str, data: bytes, dtype: str) -> np.ndarray:
    try:
        return np.frombuffer(data, np.dtype(dtype))
    except (TypeError, ValueError) as e:
        raise AccuracyError(f"{metric}: cannot decode {len(data)} response bytes as {dtype}: {e}") from e


class TopK(AccuracyMetric):
    k = 1
    name = "top1"
    prefix = "accuracy"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        path, raw = _labels(self.name, ctx)
        features = ctx.options.get("features")
        numeric = all(x.lstrip("-").isdigit() for x in raw)
        features_path = _features(features, ctx) if features and not numeric else None  # fetched only if used
        try:
            truth = dataset.class_ids(raw, features_path, path)
        except DatasetError as e:
            raise AccuracyError(f"{self.name}: {e}") from e
        dtype = str(ctx.options.get("dtype", "float32"))
        offset = int(ctx.options.get("label_offset", 0))
        good = 0
        responses = _responses(self.name, accuracy_log, len(truth), path)
        for idx, data in responses:
            v = _decode(self.name, data, dtype)
            if v.size == 0:
                continue
            guesses = [int(v[0])] if v.size == 1 else (np.argsort(-v, kind="stable")[: self.k] + offset).tolist()
            good += truth[idx] in guesses
        total = len(responses)
        value = 100.0 * good / total
        text = f"{self.prefix}={value:.3f}%, good={good}, total={total}\n"
        return AccuracyResult(text=text, value=value, name=self.name,
                              details={"good": good, "total": total, "labels": str(path)})


class Top1(TopK):
    """Top-1 against a labels file (see the module)."""


class Top5(TopK):
    """Top-5 against a labels file (see the module)."""

    k = 5
    name = "top5"
    prefix = "top5_accuracy"


def _features(option: Any, ctx: AccuracyContext) -> Path:
    text = str(option)
    if "://" in text:
        from mlharness.manifest.assets import resolve_asset

        return resolve_asset(text, None, ctx.options.get("features_checksum"))
    return _path(text, ctx)


class _Text(AccuracyMetric):
    primary = "exact_match"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from mlharness.tasks.squad.evaluate import exact_match_score, f1_score

        path, answers = _labels(self.name, ctx, whole_lines=True)
        entries = accuracy_log_entries(accuracy_log)
        responses = _responses(self.name, accuracy_log, len(answers), path, entries)
        decoded, tokenizer = texts(self.name, accuracy_log, ctx, entries, responses)
        em = f1 = 0.0
        for (idx, _), said in zip(responses, decoded, strict=True):
            em += float(exact_match_score(said, answers[idx]))
            f1 += f1_score(said, answers[idx])
        n = len(responses)
        scores = {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}
        return AccuracyResult(text=json.dumps(scores) + "\n", value=scores[self.primary], name=self.primary,
                              details={"total": n, "labels": str(path), "decoded_with": tokenizer or "utf-8",
                                       **scores})


class ExactMatch(_Text):
    """Exact match of text responses, normalised as SQuAD v1.1 (see the module)."""

    name = "exact_match"


class TokenF1(_Text):
    """Token F1 of text responses, as SQuAD v1.1 (see the module)."""

    name = "token_f1"
    primary = "f1"


class _Regression(AccuracyMetric):
    short = "mae"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        path, raw = _labels(self.name, ctx)
        try:
            targets = [float(x) for x in raw]
        except ValueError as e:
            raise AccuracyError(f"{self.name}: labels file {path} must hold one number per sample: {e}") from e
        dtype = str(ctx.options.get("dtype", "float32"))
        responses = _responses(self.name, accuracy_log, len(targets), path)
        errors = np.array([float(_decode(self.name, d, dtype)[0]) - targets[i] for i, d in responses])
        value = float(np.mean(np.abs(errors))) if self.short == "mae" else float(np.mean(errors**2))
        return AccuracyResult(text=f"{self.short}={value:.6f}, total={len(errors)}\n", value=value, name=self.short,
                              details={"total": len(errors), "labels": str(path)})


class MeanAbsoluteError(_Regression):
    """Mean absolute error of one-number responses (see the module)."""

    name = "mean_absolute_error"


class MeanSquaredError(_Regression):
    """Mean squared error of one-number responses (see the module)."""

    name = "mean_squared_error"
    short = "mse"


class DetectionMap(AccuracyMetric):
    """COCO-style mAP against the ``annotations`` option (a COCO-format file relative to the dataset path)."""

    name = "detection_map"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from mlharness.tasks.detection.cocomap import score_map

        if "annotations" not in ctx.options:
            raise AccuracyError("detection_map: the accuracy option 'annotations' (a COCO-format file) is required")
        return score_map(accuracy_log, ctx, metric=self.name, annotations=str(ctx.options["annotations"]),
                         image_dir=str(ctx.options.get("images", ".")))
