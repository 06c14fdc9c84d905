"""dlrm-v3: HSTU generative recommendation over a time-ordered stream of user histories (jagged id and timestamp
sequences), NE/ACC/gAUC as ``recommendation/dlrm_v3/accuracy.py`` computes them, and TEST08's verification."""

METRICS = {"dlrm_v3": "mlharness.tasks.dlrm_v3.metric:DlrmV3Metric"}
