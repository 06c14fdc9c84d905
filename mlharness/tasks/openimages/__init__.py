"""OpenImages (MLPerf subset) for RetinaNet: official layout, synthetic set, reference pre/post-processing, mAP."""

METRICS = {"openimages_map": "mlharness.tasks.openimages.metric:OpenImagesMapMetric"}
