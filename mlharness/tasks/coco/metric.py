"""COCO mAP: ``accuracy-coco.py`` (annotations/instances_val2017.json, val2017), as the YOLO benchmark scores."""

from __future__ import annotations

from pathlib import Path

from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult
from mlharness.tasks.coco.dataset import ANNOTATIONS, IMAGE_DIR
from mlharness.tasks.detection.cocomap import score_map


class CocoMapMetric(AccuracyMetric):
    """Options: ``annotations`` (default annotations/instances_val2017.json, relative to the dataset path),
    ``images`` (val2017; only named in the detections, as the script does), ``dtype`` (float32)."""

    name = "coco_map"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        return score_map(accuracy_log, ctx, metric=self.name, annotations=ANNOTATIONS, image_dir=IMAGE_DIR)
