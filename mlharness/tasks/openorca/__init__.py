"""OpenOrca question answering for llama2-70b-99.9: the official pickle layout and its Llama 2 chat prompts, the
synthetic set, the oracle table and the tiny random Llama, and ROUGE as the official ``evaluate-accuracy.py``
computes it."""

METRICS = {"openorca_rouge": "mlharness.tasks.openorca.metric:OpenOrcaRougeMetric"}
