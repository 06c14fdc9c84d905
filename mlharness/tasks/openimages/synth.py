"""A synthetic OpenImages set in the official layout (``mlharness dataset synth openimages``): JPEGs named like
OpenImages ImageIDs under validation/data and annotations/openimages-mlperf.json with the 264 MLPerf categories
(ids 0..263). The objects are the palette rectangles of :mod:`mlharness.tasks.detection.scenes`; colour k is
category ``SLOT_LABELS[k]`` (category 0 included), which the RetinaNet oracle answers."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mlharness.tasks.detection.scenes import Layout, write_dataset
from mlharness.tasks.openimages.dataset import ANNOTATIONS, CLASSES, IMAGE_DIR

SLOT_LABELS = (0, 37, 71, 105, 139, 173, 207, 263)


def file_name(index: int) -> str:
    return hashlib.sha1(f"mlharness-openimages-{index}".encode()).hexdigest()[:16] + ".jpg"


LAYOUT = Layout(
    image_dir=IMAGE_DIR, annotations=ANNOTATIONS, file_name=file_name, image_id=lambda i: i + 1,
    categories=[{"id": i, "name": f"Class {i:03d}", "supercategory": None} for i in range(CLASSES)],
    slot_category=SLOT_LABELS, info={"dataset": "openimages_mlperf", "version": "v6", "synthetic": True},
)


def write_synthetic_openimages(out: Path | str, count: int, seed: int = 0, min_side: int = 160,
                               max_side: int = 320) -> Path:
    return write_dataset(out, LAYOUT, count, seed, min_side, max_side)
