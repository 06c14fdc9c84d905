"""Accuracy for any model declared in its manifest, no task to write: top-1/top-5 against a labels file, exact
match and token F1 for text, mean absolute/squared error for regression, COCO-style mAP for detection,
answers' exact match, F1 and retrieval recall@k for a RAG pipeline's records."""

METRICS = {
    "top1": "mlharness.tasks.generic.metric:Top1",
    "top5": "mlharness.tasks.generic.metric:Top5",
    "exact_match": "mlharness.tasks.generic.metric:ExactMatch",
    "token_f1": "mlharness.tasks.generic.metric:TokenF1",
    "mean_absolute_error": "mlharness.tasks.generic.metric:MeanAbsoluteError",
    "mean_squared_error": "mlharness.tasks.generic.metric:MeanSquaredError",
    "detection_map": "mlharness.tasks.generic.metric:DetectionMap",
    "rag_qa": "mlharness.tasks.generic.metric:RagQa",  # any RAG pipeline: answers' EM/F1, retrieval recall@k
}
