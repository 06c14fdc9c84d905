"""e2e-rag-qna (MLPerf v6.1): FRAMES multi-hop questions over a frozen Wikipedia corpus, answered by a pipeline of
stages (retrieval, reranking, an answering LLM) and scored by an LLM judge as ``e2e-rag/accuracy_eval.py`` scores
them; its synthetic data set, the judge client and stand-in server, the oracle stage and the metric."""

METRICS = {"e2e_rag_qna": "mlharness.tasks.e2e_rag.metric:E2ERagQnaMetric",
           "e2e_rag_db": "mlharness.tasks.e2e_rag.metric:E2ERagDbMetric"}
