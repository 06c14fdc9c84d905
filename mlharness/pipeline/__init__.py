"""Systems under test made of stages: a manifest names an ordered list of stages (retrieval, reranking, any
predictor mlharness has), each with its own workers and deadline, and LoadGen sees one sample in and one answer
out (docs/pipelines.md)."""
