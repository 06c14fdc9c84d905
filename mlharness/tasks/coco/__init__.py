"""COCO 2017 validation (MLPerf YOLO subset): official layout, synthetic set, Ultralytics pre/post-processing, mAP."""

METRICS = {"coco_map": "mlharness.tasks.coco.metric:CocoMapMetric"}
