"""Generated RetinaNet stand-ins (``model.generator`` hooks of the retinanet-oracle and retinanet-random
manifests), both with the MLPerf RetinaNet ONNX interface: ``images`` [1, 3, S, S] -> ``boxes`` [N, 4]
(model pixels, xyxy), ``scores`` [N] (highest first), ``labels`` [N] (int64, category ids 0..263)."""

from __future__ import annotations

from pathlib import Path

from mlharness.tasks.detection import oracle
from mlharness.tasks.detection.generated import ensure_onnx, torch_to_onnx, variant
from mlharness.tasks.openimages.synth import SLOT_LABELS

DEFAULT_SIZE = 800


def ensure_oracle_model(path: Path) -> Path:
    """The colour-box oracle for synthetic OpenImages (input size from the file name, default 800)."""
    size, _ = variant(path, DEFAULT_SIZE)
    doc = f"mlharness: RetinaNet oracle for synthetic OpenImages, {size}x{size}, labels {list(SLOT_LABELS)}"
    return ensure_onnx(path, doc, lambda: oracle.retinanet_oracle(size, SLOT_LABELS, doc))


def ensure_random_model(path: Path) -> Path:
    """RetinaNet ResNeXt50-32x4d-FPN (264 classes, 9 anchors, P3-P7) with random weights (seed 0); ``_tiny`` in
    the file name divides every width by 8 for quick pipeline tests."""
    from mlharness.tasks.openimages.retinanet_torch import RandomRetinaNet

    size, tiny = variant(path, DEFAULT_SIZE)
    doc = f"mlharness: RetinaNet ResNeXt50-FPN, random weights (seed 0), {size}x{size}{', tiny' if tiny else ''}"
    return ensure_onnx(path, doc, lambda: torch_to_onnx(RandomRetinaNet(size, tiny), size, "images",
                                                        ["boxes", "scores", "labels"]))
