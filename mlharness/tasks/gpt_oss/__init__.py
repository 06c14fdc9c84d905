"""gpt-oss-120b: the mlperf_gpt_oss data files (parquet, Harmony-format prompts as token ids), the synthetic set,
the oracle table and the tiny random GptOss, and exact_match as the official ``eval_mlperf_accuracy.py`` computes
it."""

METRICS = {"gpt_oss_exact_match": "mlharness.tasks.gpt_oss.metric:GptOssExactMatchMetric"}
