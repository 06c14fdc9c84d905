"""deepseek-r1: the five-dataset mix (AIME, MATH500, GPQA, MMLU-Pro, LiveCodeBench) in the official pickle
layout, the synthetic set, the oracle table and the tiny random DeepseekV3, and exact_match as the official
``eval_accuracy.py`` computes it, with LiveCodeBench programs run in a sandbox."""

METRICS = {"deepseek_r1_accuracy": "mlharness.tasks.deepseek_r1.metric:DeepSeekR1AccuracyMetric"}
