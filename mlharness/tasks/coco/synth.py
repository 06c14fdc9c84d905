"""A synthetic COCO validation set in the official layout (``mlharness dataset synth coco``): JPEGs named like
COCO's under val2017 and annotations/instances_val2017.json with the 80 COCO categories under their 91-id
numbering and sparse image ids. Colour k of :mod:`mlharness.tasks.detection.scenes` is YOLO class
``SLOT_CLASSES[k]`` (0..79), written in the annotations as ``COCO_80_TO_91[class]``: a response without the
80 -> 91 map is off for every class from 11 up."""

from __future__ import annotations

from pathlib import Path

from mlharness.tasks.coco.dataset import ANNOTATIONS, IMAGE_DIR
from mlharness.tasks.detection.boxes import COCO_80_TO_91
from mlharness.tasks.detection.scenes import Layout, write_dataset

SLOT_CLASSES = (0, 11, 24, 39, 44, 56, 62, 79)
NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
    "hair drier", "toothbrush",
)  # fmt: skip


def image_id(index: int) -> int:
    return 139 + 37 * index  # sparse, like COCO's


LAYOUT = Layout(
    image_dir=IMAGE_DIR, annotations=ANNOTATIONS, file_name=lambda i: f"{image_id(i):012d}.jpg", image_id=image_id,
    categories=[{"id": cid, "name": name, "supercategory": "object"}
                for cid, name in zip(COCO_80_TO_91, NAMES, strict=True)],
    slot_category=[COCO_80_TO_91[c] for c in SLOT_CLASSES],
    info={"description": "mlharness synthetic COCO 2017 validation", "version": "1.0", "synthetic": True},
)


def write_synthetic_coco(out: Path | str, count: int, seed: int = 0, min_side: int = 160,
                         max_side: int = 320) -> Path:
    return write_dataset(out, LAYOUT, count, seed, min_side, max_side)
