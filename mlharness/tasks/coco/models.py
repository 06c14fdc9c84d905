"""Generated YOLO stand-ins (``model.generator`` hooks of the yolo-oracle and yolo-random manifests), both with
the Ultralytics ONNX export interface: ``images`` [1, 3, S, S] -> ``output0`` [1, 84, anchors] (cx, cy, w, h in
model pixels, then 80 class scores; 8400 anchors at 640)."""

from __future__ import annotations

from pathlib import Path

from mlharness.tasks.coco.synth import SLOT_CLASSES
from mlharness.tasks.detection import oracle
from mlharness.tasks.detection.generated import ensure_onnx, torch_to_onnx, variant

DEFAULT_SIZE = 640


def ensure_oracle_model(path: Path) -> Path:
    """The colour-box oracle for synthetic COCO (input size from the file name, default 640)."""
    size, _ = variant(path, DEFAULT_SIZE)
    doc = f"mlharness: YOLO oracle for synthetic COCO, {size}x{size}, classes {list(SLOT_CLASSES)}"
    return ensure_onnx(path, doc, lambda: oracle.yolo_oracle(size, SLOT_CLASSES, doc))


def ensure_random_model(path: Path) -> Path:
    """A YOLO-shaped detector (CSP backbone, FPN/PAN neck, decoupled anchor-free head at strides 8/16/32, the
    YOLOv11-L widths) with random weights (seed 0); ``_tiny`` divides every width by 8."""
    from mlharness.tasks.coco.yolo_torch import RandomYolo

    size, tiny = variant(path, DEFAULT_SIZE)
    doc = f"mlharness: YOLO-shaped detector, random weights (seed 0), {size}x{size}{', tiny' if tiny else ''}"
    return ensure_onnx(path, doc, lambda: torch_to_onnx(RandomYolo(size, tiny), size, "images", ["output0"]))
