"""CNN/DailyMail summarization for llama3.1-8b (datacenter and edge): the official ``cnn_eval.json`` layout and its
prompts, the synthetic set, the oracle table and the tiny random Llama, and ROUGE as the official
``evaluation.py`` computes it."""

METRICS = {"cnndm_rouge": "mlharness.tasks.cnndm.metric:CnnDmRougeMetric"}
