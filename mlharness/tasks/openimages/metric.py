"""OpenImages mAP: ``accuracy-openimages.py`` (annotations/openimages-mlperf.json, validation/data)."""

from __future__ import annotations

from pathlib import Path

from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult
from mlharness.tasks.detection.cocomap import score_map
from mlharness.tasks.openimages.dataset import ANNOTATIONS, IMAGE_DIR


class OpenImagesMapMetric(AccuracyMetric):
    """Options: ``annotations`` (default annotations/openimages-mlperf.json, relative to the dataset path),
    ``images`` (validation/data; only named in the detections, as the script does), ``dtype`` (float32)."""

    name = "openimages_map"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        return score_map(accuracy_log, ctx, metric=self.name, annotations=ANNOTATIONS, image_dir=IMAGE_DIR)
