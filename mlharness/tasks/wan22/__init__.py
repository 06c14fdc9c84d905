"""VBench prompts / wan-2.2-t2v-a14b: the prompt list and fixed latent in the reference's layout, a synthetic set,
tiny random Wan pipelines and the oracle, and the VBench score as ``run_evaluation.py`` aggregates it."""

METRICS = {"wan22_vbench": "mlharness.tasks.wan22.metric:VBenchMetric"}
