"""qwen3-vl-235b-a22b: the Shopify product catalogue (parquet, one product image per row) in the official layout,
its reference chat prompt (system prompt with the ProductMetadata JSON schema, product text and the image), the
synthetic set, the oracle table, and the hierarchical category F1 as the official ``evaluation.py`` computes it."""

METRICS = {"qwen3_vl_f1": "mlharness.tasks.qwen3_vl.metric:Qwen3VLF1Metric"}
