"""Tasks: datasets, reference pre/post-processing helpers and accuracy metrics."""

from mlharness.errors import AccuracyError
from mlharness.registry import Registry

METRICS = Registry(
    "accuracy metric",
    {
        "imagenet_top1": "mlharness.tasks.imagenet:ImagenetTop1Metric",
        "squad_v1.1": "mlharness.tasks.squad:SquadMetric",
        "kits19_dice": "mlharness.tasks.kits19:Kits19DiceMetric",
        "openimages_map": "mlharness.tasks.openimages.metric:OpenImagesMapMetric",
        "coco_map": "mlharness.tasks.coco.metric:CocoMapMetric",
    },
    AccuracyError,
)
