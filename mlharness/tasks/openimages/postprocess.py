"""The reference's RetinaNet post-processing (``PostProcessOpenImagesRetinanet`` of the MLPerf
``openimages.py``): the ONNX model answers one image's ``boxes`` [N, 4] (xmin, ymin, xmax, ymax in model
pixels), ``scores`` [N] (highest first) and ``labels`` [N]; detections are taken until the first score below the
threshold (0.05), boxes divided by the model's input height/width, written as 7-tuples with the label as is."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlharness.tasks.detection.boxes import encode, xyxy_to_normalised_yxyx

SCORE_THRESHOLD = 0.05


def retinanet_response(qsl_idx: int, boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray,
                       size: int = 800, score_threshold: float = SCORE_THRESHOLD) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float32).reshape(-1)
    below = np.nonzero(scores < score_threshold)[0]
    n = int(below[0]) if len(below) else len(scores)  # the reference's loop breaks at the first low score
    boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)[:n]
    return encode(qsl_idx, xyxy_to_normalised_yxyx(boxes, size, size), scores[:n],
                  np.asarray(labels).reshape(-1)[:n])


def retinanet_batch(outputs: Sequence[np.ndarray], indices: Sequence[int], size: int = 800,
                    score_threshold: float = SCORE_THRESHOLD) -> list[np.ndarray]:
    """One response per sample of a batch of one (the ONNX model has no batch axis on its outputs)."""
    boxes, scores, labels = outputs[:3]
    if len(indices) != 1:
        raise ValueError(f"the RetinaNet ONNX outputs describe one image; got a batch of {len(indices)} "
                         f"(set batching.max_batchsize to 1)")
    return [retinanet_response(int(indices[0]), boxes, scores, labels, size, score_threshold)]
