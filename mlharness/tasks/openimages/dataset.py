"""The MLPerf OpenImages validation subset in the layout the reference and ``accuracy-openimages.py`` read:

    <root>/annotations/openimages-mlperf.json   COCO format; categories 0..263; images in qsl_idx order
    <root>/validation/data/<ImageID>.jpg        original images (height/width as in the annotations)
"""

from __future__ import annotations

from pathlib import Path

from mlharness.tasks.detection.images import DetectionImages, read_images

ANNOTATIONS = "annotations/openimages-mlperf.json"
IMAGE_DIR = "validation/data"
CLASSES = 264


def validation_images(root: Path | str | None, count: int | None = None, annotations: str = ANNOTATIONS,
                      image_dir: str = IMAGE_DIR) -> DetectionImages:
    return read_images(root, annotations, image_dir, count, "OpenImages")
