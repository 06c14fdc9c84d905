"""COCO 2017 validation (the MLPerf YOLO benchmark uses its 1,525-image "safe" subset) in the layout
``accuracy-coco.py`` reads:

    <root>/annotations/instances_val2017.json   COCO format; the 80 categories with their 91-id numbering
    <root>/val2017/<%012d>.jpg                  images (the safe subset's folder is val2017_safe: set the
                                                dataset attribute ``images``)
"""

from __future__ import annotations

from pathlib import Path

from mlharness.tasks.detection.images import DetectionImages, read_images

ANNOTATIONS = "annotations/instances_val2017.json"
IMAGE_DIR = "val2017"


def validation_images(root: Path | str | None, count: int | None = None, annotations: str = ANNOTATIONS,
                      image_dir: str = IMAGE_DIR) -> DetectionImages:
    return read_images(root, annotations, image_dir, count, "COCO")
