"""The reference's RetinaNet pre-processing (``pre_process_openimages_retinanet`` of the MLPerf
classification_and_detection ``dataset.py``): OpenCV decode (BGR, 3 channels), float32, BGR -> RGB, resize to
the model's square input with INTER_LINEAR, divide by 255, HWC -> CHW."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import check_regular_file


def read_bgr(path: Path | str) -> np.ndarray:
    import cv2

    # cv2 takes only a path: checked first, so a FIFO or device is named, never waited on or read for ever
    check_regular_file(Path(path), "image", error=DatasetError)
    img = cv2.imread(str(path))  # always 3-channel BGR, as the reference's cv2.imread(src)
    if img is None:
        raise DatasetError(f"cannot decode image {path}")
    return img


def retinanet(img_bgr: np.ndarray, size: int = 800) -> np.ndarray:
    """[3, size, size] float32 in [0, 1], RGB: ``maybe_resize`` then ``/= 255.0`` and the NCHW transpose."""
    import cv2

    img = np.array(img_bgr, dtype=np.float32)
    if img.ndim < 3 or img.shape[2] != 3:
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    img = cv2.resize(img, (size, size), interpolation=cv2.INTER_LINEAR)
    img /= 255.0
    return np.ascontiguousarray(img.transpose(2, 0, 1))


def retinanet_file(path: Path | str, size: int = 800) -> np.ndarray:
    return retinanet(read_bgr(path), size)
