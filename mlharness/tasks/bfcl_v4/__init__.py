"""BFCL v4 single-turn function calling (qwen3.6-27b's accuracy): the official data files (bfcl-eval's wheel ships
them) and a synthetic set in the same layout, the MLPerf selection of the endpoints reference (995 entries), each
entry as a one-turn Session with OpenAI tools, and the reference's score with bfcl-eval's AST checker run in its own
environment (``MLHARNESS_BFCL_PYTHON``)."""

METRICS = {"bfcl_v4": "mlharness.tasks.bfcl_v4.metric:BFCLv4Metric"}
