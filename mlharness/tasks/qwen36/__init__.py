"""qwen3.6-27b (MLPerf v6.1 edge, SingleStream): the sessions of a run (BFCL v4 single-turn prompts in accuracy mode,
the recorded agentic coding sessions in performance mode), their synthetic stand-ins, the session oracle's table and
the tiny random Qwen3.6. Its accuracy metric is BFCL v4's (``bfcl_v4``, in ``mlharness.tasks.bfcl_v4``)."""

METRICS: dict[str, str] = {}
