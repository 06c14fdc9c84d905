"""KiTS19 DICE: a port of the MLPerf reference's ``accuracy_kits.py``.

The reference decodes each accuracy-log response as uint8 labels in the pre-processed case's shape (exactly one
entry per case), saves it as ``<case>/prediction.nii.gz`` with the case's resampled affine, and scores it against
the pre-processed ground truth: per class c in (kidney = 1, tumor = 2), on one-hot labels,
``(2 |X_c & Y_c| + 1e-6) / (|X_c| + |Y_c| + 1e-6)`` (so a class absent from both scores 1), the case's composite is
the mean of the two, a NaN (a crash, in the reference's words) counts as 0, and the figures are the means over
the cases.  It writes ``summary.csv`` (columns case, kidney, tumor, composite, then a ``mean`` row) and prints
``Accuracy: mean = {:.5f}, kidney = {:.4f}, tumor = {:.4f}``; so does this module, beside the accuracy log
(``kits19_dice.csv`` and ``kits19_predictions/<case>/prediction.nii.gz``).

The reference refuses a log that does not hold every case of the dataset exactly once ("Number of predictions
does not match number of samples").  A development run over some cases (``--count``) is scored all the same,
but its line reads ``subset of N of M cases, not comparable: ...`` instead of the official one, so it is
never taken for the benchmark's figure.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import (
    AccuracyContext,
    AccuracyMetric,
    AccuracyResult,
    accuracy_log_entries,
    subset_line,
)

log = logging.getLogger(__name__)

CLASSES = {"kidney": 1, "tumor": 2}
NUM_CLASSES = 3
SMOOTH_NR = 1e-6
SMOOTH_DR = 1e-6
CSV_FILE = "kits19_dice.csv"
CSV_COLUMNS = ("case", "kidney", "tumor", "composite")
PREDICTIONS_DIR = "kits19_predictions"
# The reference's --output_dtype choices.
DTYPES: dict[str, type[np.generic]] = {
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
}


def dice_scores(prediction: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """(kidney, tumor) DICE of one case, the reference's formula on its one-hot classes 1 and 2."""
    if prediction.shape != target.shape:
        raise AccuracyError(f"prediction {prediction.shape} and ground truth {target.shape} differ in shape")
    out = []
    for c in CLASSES.values():
        p, t = prediction == c, target == c
        inter = float(np.count_nonzero(p & t))
        out.append((2.0 * inter + SMOOTH_NR) / (float(np.count_nonzero(t)) + float(np.count_nonzero(p)) + SMOOTH_DR))
    return out[0], out[1]


def summarize(rows: list[tuple[str, float, float]]) -> dict[str, float]:
    """Means over cases of composite (per-case mean of kidney and tumor), kidney and tumor; NaN counts as 0."""
    if not rows:
        raise AccuracyError("no case to score")
    kidney = np.array([r[1] for r in rows], dtype=np.float64)
    tumor = np.array([r[2] for r in rows], dtype=np.float64)
    composite = np.mean(np.stack([kidney, tumor]), axis=0)  # NaN when either class is NaN, as np.mean(arr)
    return {name: float(np.nan_to_num(col, nan=0.0).mean())
            for name, col in (("composite", composite), ("kidney", kidney), ("tumor", tumor))}


def accuracy_text(summary: dict[str, float]) -> str:
    return "Accuracy: mean = {:.5f}, kidney = {:.4f}, tumor = {:.4f}\n".format(  # noqa: UP032 - the reference's
        summary["composite"], summary["kidney"], summary["tumor"])


def _csv_value(v: float) -> str:
    return "" if math.isnan(v) else repr(float(v))  # pandas' to_csv: repr floats, NaN as an empty field


def write_csv(path: Path, rows: list[tuple[str, float, float]], summary: dict[str, float]) -> None:
    lines = [",".join(CSV_COLUMNS)]  # the reference's column order
    for case, kidney, tumor in rows:
        composite = float(np.mean([kidney, tumor]))
        lines.append(",".join([case, _csv_value(kidney), _csv_value(tumor), _csv_value(composite)]))
    lines.append(",".join(["mean", *(_csv_value(summary[k]) for k in CSV_COLUMNS[1:])]))
    path.write_text("\n".join(lines) + "\n")


def save_prediction(path: Path, labels: np.ndarray, affine: np.ndarray) -> None:
    import nibabel

    path.parent.mkdir(parents=True, exist_ok=True)
    nibabel.save(nibabel.Nifti1Image(labels, affine=affine), str(path))


class Kits19DiceMetric(AccuracyMetric):
    """Mean composite DICE over the cases of an accuracy log, as ``accuracy_kits.py``.

    Options: ``dtype`` (response dtype, default uint8), ``save_predictions`` (default true), ``output_dir``
    (default: the accuracy log's folder).
    """

    name = "kits19_dice"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from mlharness.tasks.kits19.prepared import PreparedKits19

        dtype_name = str(ctx.options.get("dtype", "uint8"))
        if dtype_name not in DTYPES:
            raise AccuracyError(f"kits19_dice: unsupported response dtype '{dtype_name}'; expected one of "
                                f"{', '.join(DTYPES)}")
        try:
            data = PreparedKits19.load(ctx.dataset_path)
        except DatasetError as e:
            raise AccuracyError(f"kits19_dice: {e}") from e
        by_index = self._responses(accuracy_log, data.cases, ctx.count)
        out_dir = Path(ctx.options.get("output_dir") or Path(accuracy_log).parent)
        save = bool(ctx.options.get("save_predictions", True))
        rows: list[tuple[str, float, float]] = []
        for index in sorted(by_index):  # the reference's order: its file list
            case = data.cases[index]
            entry = data.entry(case)
            labels = self._decode(by_index[index].data(Path(accuracy_log)), DTYPES[dtype_name],
                                  entry["image_shape"], case)
            try:
                target = data.ground_truth(case)
            except DatasetError as e:
                raise AccuracyError(f"kits19_dice: {e}") from e
            if save:
                save_prediction(out_dir / PREDICTIONS_DIR / case / "prediction.nii.gz", labels,
                                np.asarray(entry["reshaped_affine"]))
            kidney, tumor = dice_scores(labels, target)
            log.debug("%s: kidney %.4f tumor %.4f", case, kidney, tumor)
            rows.append((case, kidney, tumor))

        summary = summarize(rows)
        csv_path = out_dir / CSV_FILE
        write_csv(csv_path, rows, summary)
        official = len(rows) == len(data)
        text = accuracy_text(summary) if official else subset_line(
            len(rows), len(data), "cases", "DICE mean = {:.5f}, kidney = {:.4f}, tumor = {:.4f}".format(  # noqa: UP032
                summary["composite"], summary["kidney"], summary["tumor"]))
        return AccuracyResult(
            text=text, value=summary["composite"], name="mean_dice", official=official,
            details={**summary, "cases": len(rows), "cases_total": len(data), "csv": str(csv_path),
                     "predictions": str(out_dir / PREDICTIONS_DIR) if save else None,
                     "per_case": {c: {"kidney": k, "tumor": t} for c, k, t in rows}},
        )

    @staticmethod
    def _responses(accuracy_log: Path, cases: list[str], count: int) -> dict[int, Any]:
        """qsl_idx -> log entry.  Each case at most once (the reference refuses a second response); with
        ``count`` (a run over the first ``count`` cases) exactly the cases 0..count-1, each once."""
        expected = min(count, len(cases)) if count else len(cases)
        by_index: dict[int, Any] = {}
        for entry in accuracy_log_entries(accuracy_log):
            if not 0 <= entry.qsl_idx < expected:
                raise AccuracyError(f"kits19_dice: {accuracy_log}: {entry.where} is outside the {expected} cases "
                                    "scored")
            if entry.qsl_idx in by_index:
                raise AccuracyError(f"kits19_dice: {accuracy_log}: case {cases[entry.qsl_idx]} (qsl_idx "
                                    f"{entry.qsl_idx}) has more than one response; the reference expects exactly "
                                    "one per case")
            by_index[entry.qsl_idx] = entry
        missing = [cases[i] for i in range(expected) if i not in by_index]
        if not by_index or (count and missing):
            raise AccuracyError(f"kits19_dice: {accuracy_log} has no response for {len(missing)} of the {expected} "
                                f"cases (first: {', '.join(missing[:5])})")
        return by_index

    @staticmethod
    def _decode(raw: bytes, dtype: type[np.generic], shape: list[int], case: str) -> np.ndarray:
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if len(raw) != size:
            raise AccuracyError(f"kits19_dice: the response for {case} has {len(raw)} bytes; its pre-processed shape "
                                f"{tuple(shape)} in {np.dtype(dtype).name} needs {size}")
        labels = np.frombuffer(raw, dtype).reshape(shape)
        if np.issubdtype(labels.dtype, np.floating):
            # the reference saves the response as NIfTI and reads it back with get_fdata().astype(np.uint8):
            # fractional labels are truncated toward zero
            if not np.isfinite(labels).all():
                raise AccuracyError(f"kits19_dice: the response for {case} holds NaN or infinite labels")
            labels = np.trunc(labels)
        lo, hi = labels.min(), labels.max()
        if lo < 0 or hi >= NUM_CLASSES:
            raise AccuracyError(f"kits19_dice: the response for {case} holds labels outside 0 (background), "
                                f"1 (kidney) and 2 (tumor): range [{lo}, {hi}]")
        return labels.astype(np.uint8)


def score_log(log_file: Path, preprocessed_dir: Path, count: int | None = None,
              options: dict[str, Any] | None = None) -> AccuracyResult:
    """Score an accuracy log outside a run (the ``mlharness accuracy kits19`` command)."""
    ctx = AccuracyContext(dataset_path=Path(preprocessed_dir), count=count or 0, options=dict(options or {}))
    return Kits19DiceMetric().score(Path(log_file), ctx)
