"""Ultralytics' YOLO pre-processing for a fixed-size (exported) model: ``LetterBox(new_shape, auto=False,
scaleup=True)`` — scale by ``r = min(S / h, S / w)``, INTER_LINEAR resize to ``round(w r) x round(h r)``, pad to
S x S with gray 114, the padding split as ``round(d - 0.1)`` / ``round(d + 0.1)`` — then BGR -> RGB, HWC -> CHW,
float32 / 255. :func:`letterbox_params` gives the gain and padding that ``scale_boxes`` undoes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.tasks.openimages.preprocess import read_bgr

PAD_VALUE = 114


def letterbox_params(height: int, width: int, size: int = 640) -> tuple[float, int, int, int, int]:
    """(gain, new height, new width, top pad, left pad) of an image of ``height`` x ``width``."""
    r = min(size / height, size / width)
    new_w, new_h = int(round(width * r)), int(round(height * r))
    dw, dh = (size - new_w) / 2, (size - new_h) / 2
    return r, new_h, new_w, int(round(dh - 0.1)), int(round(dw - 0.1))


def letterbox(img_bgr: np.ndarray, size: int = 640) -> np.ndarray:
    """[size, size, 3] uint8 BGR, as Ultralytics' LetterBox."""
    import cv2

    h, w = img_bgr.shape[:2]
    _, new_h, new_w, top, left = letterbox_params(h, w, size)
    if (w, h) != (new_w, new_h):
        img_bgr = cv2.resize(img_bgr, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    bottom, right = size - new_h - top, size - new_w - left
    return cv2.copyMakeBorder(img_bgr, top, bottom, left, right, cv2.BORDER_CONSTANT,
                              value=(PAD_VALUE, PAD_VALUE, PAD_VALUE))


def yolo(img_bgr: np.ndarray, size: int = 640) -> np.ndarray:
    """[3, size, size] float32 RGB in [0, 1]."""
    img = letterbox(img_bgr, size)[..., ::-1].transpose(2, 0, 1)
    return np.ascontiguousarray(img, dtype=np.float32) / np.float32(255.0)


def yolo_file(path: Path | str, size: int = 640) -> np.ndarray:
    return yolo(read_bgr(path), size)
