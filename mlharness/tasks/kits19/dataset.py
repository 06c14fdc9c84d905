"""KiTS19 for the MLPerf 3D U-Net benchmark: the raw layout, the reference pre-processing and ``prepare()``.

Raw layout (the KiTS19 repository's ``data/`` folder): ``case_XXXXX/imaging.nii.gz`` and
``case_XXXXX/segmentation.nii.gz``.  The pre-processing reproduces the reference's ``preprocess.py`` step by step
(see :func:`preprocess_volumes`): resample to 1.6 x 1.2 x 1.2 mm (image linear, label nearest), clip to
[-79, 304] HU, normalise with (x - 101) / 76.9, edge-pad every edge to at least 128, then crop or pad each edge to
a multiple of 64 so the 128^3 sliding window with 50% overlap tiles the volume exactly.

A prepared folder holds, per case, ``images/<case>.npy`` (float32, (1, D, H, W)), ``labels/<case>.npy``
(uint8) and the reference's ground truth ``nifti/<case>/segmentation.nii.gz`` (with the case's affine rescaled to
the new spacing), plus ``kits19_preprocessed.json`` (case order = qsl index, shapes, affines, sha256 of every file)
and the reference's ``preprocessed_files.pkl`` so the official ``accuracy_kits.py`` can score it too.  A folder
written by the reference's own ``preprocess.py`` is read as well (:mod:`mlharness.tasks.kits19.prepared`).  The
DICE metric lives in :mod:`mlharness.tasks.kits19.metric`.
"""

from __future__ import annotations

import json
import logging
import pickle
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, check_regular_file, hash_file, parse_json, read_text_bounded
from mlharness.tasks.files import atomic_write_bytes

log = logging.getLogger(__name__)

# The reference's meta/inference_cases.json, plus case_00400: its Makefile copies case_00185 to case_00400 so the
# inference set has 43 cases.
INFERENCE_CASES: tuple[str, ...] = tuple(f"case_{n:05d}" for n in (
    0, 3, 5, 6, 12, 24, 34, 41, 44, 49, 52, 56, 61, 65, 66, 70, 76, 78, 80, 84, 86, 87, 92, 111, 112, 125, 128,
    138, 157, 160, 161, 162, 169, 171, 176, 185, 187, 189, 198, 203, 206, 207, 400))
DUPLICATED_CASES = {"case_00400": "case_00185"}

# global_vars.py of the reference
TARGET_SPACING: tuple[float, float, float] = (1.6, 1.2, 1.2)
MEAN_VAL = 101.0
STDDEV_VAL = 76.9
MIN_CLIP_VAL = -79.0
MAX_CLIP_VAL = 304.0
PADDING_VAL = -2.2
ROI_SHAPE: tuple[int, int, int] = (128, 128, 128)
SLIDE_OVERLAP_FACTOR = 0.5

META_FILE = "kits19_preprocessed.json"
REFERENCE_META_FILE = "preprocessed_files.pkl"
FORMAT = "mlharness-kits19-preprocessed"
_CASE_RE = re.compile(r"^case_\d{5}$")


# -- raw layout ----------------------------------------------------------------------------------------------
def find_cases(raw: Path) -> list[str]:
    """Sorted case folders of a raw KiTS19 ``data`` folder that hold an ``imaging.nii.gz``."""
    raw = Path(raw)
    if not raw.is_dir():
        raise DatasetError(f"KiTS19 raw data folder {raw} does not exist")
    return sorted(p.name for p in raw.iterdir() if _CASE_RE.match(p.name) and (p / "imaging.nii.gz").is_file())


def read_case_list(path: Path) -> list[str]:
    """Case ids from a JSON list (the reference's ``meta/inference_cases.json``) or one id per line."""
    try:
        text = read_text_bounded(Path(path), "case list", DATA_FILE_LIMIT, error=DatasetError)
    except OSError as e:
        raise DatasetError(f"cannot read case list {path}: {e}") from e
    try:
        cases = parse_json(text, f"case list {path}", error=ValueError)
    except ValueError:  # not JSON: one case id a line
        cases = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not isinstance(cases, list) or not all(isinstance(c, str) and _CASE_RE.match(c) for c in cases):
        raise DatasetError(f"{path}: expected a list of case ids like 'case_00000'")
    if len(set(cases)) != len(cases):
        raise DatasetError(f"{path}: the case list names a case twice")
    return cases


def case_source(raw: Path, case: str) -> str:
    """The folder a case is read from: itself, or the case it duplicates (case_00400 is case_00185)."""
    if (Path(raw) / case / "imaging.nii.gz").is_file():
        return case
    original = DUPLICATED_CASES.get(case)
    if original and (Path(raw) / original / "imaging.nii.gz").is_file():
        return original
    raise DatasetError(f"case {case} is not in {raw} (expected {case}/imaging.nii.gz and segmentation.nii.gz)")


# -- the reference's pre-processing arithmetic ----------------------------------------------------------------
def _strides(roi_shape: Sequence[int], overlap: float) -> list[int]:
    return [int(r * (1 - overlap)) for r in roi_shape]


def min_shape_padding(shape: Sequence[int], roi_shape: Sequence[int] = ROI_SHAPE) -> list[tuple[int, int]]:
    """Edge padding that brings every edge to at least the window: the shortfall, the smaller half first."""
    bounds = [max(0, r - s) for s, r in zip(shape, roi_shape, strict=True)]
    return [(b // 2, b - b // 2) for b in bounds]


def window_crop(shape: Sequence[int], roi_shape: Sequence[int] = ROI_SHAPE,
                overlap: float = SLIDE_OVERLAP_FACTOR) -> list[tuple[int, int]]:
    """(start, stop) kept per edge: an edge whose remainder modulo the stride is below half a stride loses it,
    the smaller half at the start."""
    out = []
    for s, stride in zip(shape, _strides(roi_shape, overlap), strict=True):
        b = s % stride
        b = b if b < stride // 2 else 0
        out.append((b // 2, s - (b - b // 2)))
    return out


def window_padding(shape: Sequence[int], roi_shape: Sequence[int] = ROI_SHAPE,
                   overlap: float = SLIDE_OVERLAP_FACTOR) -> list[tuple[int, int]]:
    """Constant padding up to the next multiple of the stride (one more stride if still below the window),
    the smaller half first."""
    out = []
    for s, r, stride in zip(shape, roi_shape, _strides(roi_shape, overlap), strict=True):
        b = (stride - s % stride) % stride
        b = b if s + b >= r else b + stride
        out.append((b // 2, b - b // 2))
    return out


def reshaped_affine(affine: np.ndarray, target_spacing: Sequence[float] = TARGET_SPACING) -> np.ndarray:
    """The affine after resampling: each row's single non-zero of the 3x3 part becomes the target spacing of that
    voxel axis, sign kept (the reference's rule; it assumes an axis-aligned affine)."""
    out = np.array(affine, dtype=np.float64, copy=True)
    target = np.asarray(target_spacing, dtype=np.float64)
    for row in range(3):
        (cols,) = np.nonzero(out[row, :3])
        if len(cols) != 1:
            raise DatasetError(f"affine row {row} {out[row, :3].tolist()} is not axis-aligned; KiTS19 pre-processing "
                               "needs one non-zero per row")
        col = int(cols[0])
        out[row, col] = target[col] * (-1.0 if affine[row][col] < 0 else 1.0)
    return out


def preprocess_volumes(image: np.ndarray, label: np.ndarray, spacing: Sequence[float],
                       target_spacing: Sequence[float] = TARGET_SPACING) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image float32 (1, D, H, W), label uint8 (1, D, H, W), zoom factor) from raw (D, H, W) volumes."""
    from scipy.ndimage import zoom

    image = np.asarray(image, dtype=np.float32)
    label = np.asarray(label, dtype=np.uint8)
    if image.shape != label.shape or image.ndim != 3:
        raise DatasetError(f"imaging {image.shape} and segmentation {label.shape} must be 3-D of the same shape")
    zoom_factor = np.asarray(spacing, dtype=np.float64) / np.asarray(target_spacing, dtype=np.float64)
    if list(spacing) != list(target_spacing):
        image = zoom(image, zoom_factor, order=1, mode="constant", cval=float(image.min()), grid_mode=False)
        label = zoom(label, zoom_factor, order=0, mode="constant", cval=int(label.min()), grid_mode=False)
    image = np.clip(image[np.newaxis], MIN_CLIP_VAL, MAX_CLIP_VAL)
    image = (image - MEAN_VAL) / STDDEV_VAL
    label = label[np.newaxis]
    pads = [(0, 0), *min_shape_padding(image.shape[1:])]
    image, label = np.pad(image, pads, mode="edge"), np.pad(label, pads, mode="edge")
    keep = (slice(None), *(slice(a, b) for a, b in window_crop(image.shape[1:])))
    image, label = image[keep], label[keep]
    pads = [(0, 0), *window_padding(image.shape[1:])]
    image = np.pad(image, pads, mode="constant", constant_values=PADDING_VAL)
    label = np.pad(label, pads, mode="constant", constant_values=0)
    return image.astype(np.float32), label.astype(np.uint8), zoom_factor


def read_nifti(path: Path, dtype: type[np.generic]) -> Any:
    """(image object, data as ``dtype``) equal to the reference's ``get_fdata().astype(dtype)``; integer data
    without scaling skips the float64 copy (exact: such values are representable in float32)."""
    import nibabel

    # nibabel takes only a path: checked first, so a FIFO or device is named, never waited on or read for ever
    check_regular_file(Path(path), "NIfTI file", error=DatasetError)
    try:
        img = nibabel.load(str(path))
        data = np.asanyarray(img.dataobj)
        data = data.astype(dtype) if np.issubdtype(data.dtype, np.integer) else img.get_fdata().astype(dtype)
    except Exception as e:  # nibabel raises ImageFileError, OSError, EOFError, zlib errors...
        raise DatasetError(f"cannot read NIfTI file {path}: {e}") from e
    return img, data


def _sha256(path: Path) -> str:
    return hash_file(path, "pre-processed KiTS19 file", error=DatasetError)


def prepare_case(raw: Path, out: Path, case: str, image_nifti: bool = False) -> dict[str, Any]:
    """Pre-process one case into ``out``; returns its entry of the metadata (shapes, affines, checksums)."""
    import nibabel

    source = case_source(raw, case)
    img, image = read_nifti(Path(raw) / source / "imaging.nii.gz", np.float32)
    _, label = read_nifti(Path(raw) / source / "segmentation.nii.gz", np.uint8)
    spacing = [float(v) for v in img.header["pixdim"][1:4]]
    affine = np.asarray(img.affine, dtype=np.float64)
    new_affine = reshaped_affine(affine)
    original_shape = list(image.shape)
    image, label, zoom_factor = preprocess_volumes(image, label, spacing)
    files = {"image": f"images/{case}.npy", "label": f"labels/{case}.npy",
             "ground_truth": f"nifti/{case}/segmentation.nii.gz"}
    for key in files:
        (out / files[key]).parent.mkdir(parents=True, exist_ok=True)
    np.save(out / files["image"], image)
    np.save(out / files["label"], label)
    nibabel.save(nibabel.Nifti1Image(label[0], affine=new_affine), str(out / files["ground_truth"]))
    if image_nifti:
        files["image_nifti"] = f"nifti/{case}/imaging.nii.gz"
        nibabel.save(nibabel.Nifti1Image(image[0], affine=new_affine), str(out / files["image_nifti"]))
    log.info("%s: %s -> %s, mean %.2f std %.2f", case, original_shape, list(image.shape[1:]),
             float(image.mean()), float(image.std()))
    return {
        "case": case, "source": source, "image_shape": list(image.shape[1:]), "original_shape": original_shape,
        "original_spacing": spacing, "zoom_factor": zoom_factor.tolist(), "original_affine": affine.tolist(),
        "reshaped_affine": new_affine.tolist(), "files": files,
        "sha256": {rel: _sha256(out / rel) for rel in files.values()},
    }


def prepare(raw: Path, out: Path, cases: Sequence[str] | None = None, workers: int = 1,
            image_nifti: bool = False) -> Path:
    """Pre-process ``cases`` (default: every case in ``raw``) into ``out``, in ``workers`` processes.

    The metadata file is written last, so a folder without it is an interrupted preparation.
    """
    raw, out = Path(raw), Path(out)
    cases = list(cases) if cases is not None else find_cases(raw)
    if not cases:
        raise DatasetError(f"no KiTS19 cases (case_XXXXX/imaging.nii.gz) in {raw}")
    if len(set(cases)) != len(cases):
        raise DatasetError("the case list names a case twice")
    for case in cases:
        case_source(raw, case)  # fail before any work when a case is missing
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / META_FILE).unlink(missing_ok=True)
        (out / REFERENCE_META_FILE).unlink(missing_ok=True)
        workers = max(1, min(workers, len(cases)))
        if workers == 1:
            entries = [prepare_case(raw, out, c, image_nifti) for c in cases]
        else:
            with ProcessPoolExecutor(workers) as pool:
                entries = list(pool.map(prepare_case, [raw] * len(cases), [out] * len(cases), cases,
                                        [image_nifti] * len(cases)))
    except OSError as e:
        raise DatasetError(f"cannot write the pre-processed KiTS19 dataset to {out}: {e}") from e
    meta = {
        "format": FORMAT, "version": 1, "file_list": list(cases),
        "preprocessing": {"target_spacing": list(TARGET_SPACING), "clip": [MIN_CLIP_VAL, MAX_CLIP_VAL],
                          "mean": MEAN_VAL, "std": STDDEV_VAL, "padding_value": PADDING_VAL,
                          "roi_shape": list(ROI_SHAPE), "overlap": SLIDE_OVERLAP_FACTOR},
        "cases": {e["case"]: e for e in entries},
    }
    reference = {"file_list": list(cases), "cases": {
        e["case"]: {"case": e["case"], "image_shape": (1, *e["image_shape"]),
                    "original_affine": np.asarray(e["original_affine"]),
                    "reshaped_affine": np.asarray(e["reshaped_affine"]),
                    "zoom_factor": np.asarray(e["zoom_factor"])} for e in entries}}
    with open(out / REFERENCE_META_FILE, "wb") as f:
        pickle.dump(reference, f)
    atomic_write_bytes(out / META_FILE, (json.dumps(meta, indent=1) + "\n").encode())
    return out
