"""The response format the official detection scripts read, and the COCO 80 -> 91 category map.

Each sample's response is a flat float32 array of 7-tuples ``[qsl_idx, ymin, xmin, ymax, xmax, score, label]``,
coordinates normalised to [0, 1] by the original image's height and width (``accuracy-openimages.py`` and
``accuracy-coco.py`` multiply them back). A sample without detections answers an empty array, which the
scripts count as an image with no results.
"""

from __future__ import annotations

import numpy as np

FIELDS = 7

# Ultralytics' 80 contiguous COCO classes -> the 91 COCO category ids of instances_val2017.json
# (yolo_loadgen.py's COCO_80_TO_91 of the MLPerf reference).
COCO_80_TO_91 = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34,
    35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
)  # fmt: skip


def encode(qsl_idx: int, boxes_yxyx: np.ndarray, scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """[n * 7] float32 of one sample: ``boxes_yxyx`` [n, 4] already normalised (ymin, xmin, ymax, xmax)."""
    boxes = np.asarray(boxes_yxyx, dtype=np.float32).reshape(-1, 4)
    n = len(boxes)
    out = np.empty((n, FIELDS), dtype=np.float32)
    out[:, 0] = qsl_idx
    out[:, 1:5] = boxes
    out[:, 5] = np.asarray(scores, dtype=np.float32).reshape(n)
    out[:, 6] = np.asarray(labels, dtype=np.float32).reshape(n)
    return out.reshape(-1)


def decode(data: bytes) -> np.ndarray:
    """[n, 7] float32 of one response (an empty response gives n = 0; trailing partial tuples are dropped as
    the official scripts' ``range(0, len(data), 7)`` would fail on them)."""
    arr = np.frombuffer(data, dtype=np.float32)
    return arr[: len(arr) // FIELDS * FIELDS].reshape(-1, FIELDS)


def xyxy_to_normalised_yxyx(boxes_xyxy: np.ndarray, height: float, width: float) -> np.ndarray:
    """Pixel (xmin, ymin, xmax, ymax) boxes -> normalised (ymin, xmin, ymax, xmax), as the reference writes them."""
    b = np.asarray(boxes_xyxy, dtype=np.float32).reshape(-1, 4)
    return np.stack([b[:, 1] / height, b[:, 0] / width, b[:, 3] / height, b[:, 2] / width], axis=1)
