"""Ultralytics' YOLO post-processing and the MLPerf reference's response (``yolo_loadgen.py``).

``output0`` [1, 4 + 80, anchors] holds (cx, cy, w, h) in letterboxed model pixels and 80 class scores per anchor.
As Ultralytics' ``non_max_suppression`` (single label per box, class-aware): the best class per anchor, keep
scores above ``conf`` (0.001, the reference's ``predict(conf=0.001)``), the 30,000 best, greedy NMS at IoU 0.7
with boxes offset per class, at most 300 detections; ``scale_boxes`` removes the padding, divides by the gain and
clips to the image. The reference then writes ``[qsl_idx, y0 / h, x0 / w, y1 / h, x1 / w, score,
COCO_80_TO_91[cls]]`` per detection.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlharness.tasks.detection.boxes import COCO_80_TO_91, encode, xyxy_to_normalised_yxyx

CONF = 0.001
IOU = 0.7
MAX_DET = 300
MAX_NMS = 30000
MAX_WH = 7680  # Ultralytics' class offset for class-aware NMS
LABEL_MAP = np.asarray(COCO_80_TO_91, dtype=np.float32)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, max_keep: int | None = None) -> np.ndarray:
    """Indices kept by greedy NMS (``boxes`` xyxy, ``scores`` sorted high to low), as torchvision.ops.nms; with
    ``max_keep`` it stops after that many (the same first ones: greedy NMS keeps in score order)."""
    x0, y0, x1, y1 = boxes.T
    areas = (x1 - x0) * (y1 - y0)
    order = np.arange(len(boxes))
    keep: list[int] = []
    while order.size and (max_keep is None or len(keep) < max_keep):
        i = order[0]
        keep.append(i)
        rest = order[1:]
        w = np.clip(np.minimum(x1[i], x1[rest]) - np.maximum(x0[i], x0[rest]), 0, None)
        h = np.clip(np.minimum(y1[i], y1[rest]) - np.maximum(y0[i], y0[rest]), 0, None)
        inter = w * h
        order = rest[inter / (areas[i] + areas[rest] - inter) <= iou]
    return np.asarray(keep, dtype=np.int64)


def detect(pred: np.ndarray, conf: float = CONF, iou: float = IOU, max_det: int = MAX_DET
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes xyxy in model pixels, scores, class indices) of one image's ``[4 + nc, anchors]`` prediction."""
    x = np.asarray(pred, dtype=np.float32).T  # [anchors, 4 + nc]
    cls_scores = x[:, 4:]
    j = cls_scores.argmax(axis=1)
    score = cls_scores[np.arange(len(x)), j]
    keep = score > conf
    x, score, j = x[keep], score[keep], j[keep]
    order = np.argsort(-score, kind="stable")[:MAX_NMS]
    x, score, j = x[order], score[order], j[order]
    cx, cy, w, h = x[:, 0], x[:, 1], x[:, 2], x[:, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    kept = nms(boxes + (j * MAX_WH)[:, None].astype(np.float32), score, iou, max_det)
    return boxes[kept], score[kept], j[kept]


def scale_boxes(boxes: np.ndarray, height: int, width: int, size: int = 640) -> np.ndarray:
    """Model-pixel boxes -> original-image pixels, clipped (Ultralytics' ``scale_boxes`` + ``clip_boxes``)."""
    # Ultralytics' own arithmetic: the padding from the unrounded scaled size, which can differ by a pixel from
    # the padding LetterBox applied (it rounds the scaled size first)
    gain = min(size / height, size / width)
    left, top = round((size - width * gain) / 2 - 0.1), round((size - height * gain) / 2 - 0.1)
    b = boxes.astype(np.float32).copy()
    b[:, [0, 2]] -= left
    b[:, [1, 3]] -= top
    b /= gain
    b[:, [0, 2]] = b[:, [0, 2]].clip(0, width)
    b[:, [1, 3]] = b[:, [1, 3]].clip(0, height)
    return b


def yolo_response(qsl_idx: int, pred: np.ndarray, height: int, width: int, size: int = 640,
                  conf: float = CONF) -> np.ndarray:
    boxes, scores, cls = detect(pred, conf)
    boxes = scale_boxes(boxes, height, width, size)
    return encode(qsl_idx, xyxy_to_normalised_yxyx(boxes, height, width), scores, LABEL_MAP[cls])


def yolo_batch(output0: np.ndarray, indices: Sequence[int], sizes: Sequence[tuple[int, int]], size: int = 640,
               conf: float = CONF) -> list[np.ndarray]:
    """One response per sample; ``sizes[i]`` is sample i's original (height, width)."""
    return [yolo_response(int(i), output0[k], *sizes[int(i)], size=size, conf=conf) for k, i in enumerate(indices)]
