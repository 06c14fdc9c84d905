"""The pipeline kind: systems under test made of stages. A manifest names an ordered list of stages (retrieval,
reranking, any predictor mlharness has), each with its own workers and deadline, and LoadGen sees one sample in
and one answer out (docs/pipelines.md).

- the stages: the contract (``stage.py``: the item a sample carries, ``Stage``, ``StageSpec``, the registry of
  built-in stages), retrieval with FAISS and sentence-transformers embeddings (``retrieval.py``, ``index.py``,
  ``chunking.py``, ``models.py``), late-interaction reranking (``rerank.py``), e2e-rag-db's database build and
  manifest (``dbbuild.py``, ``dbmanifest.py``; docs/rag.md), any predictor as a stage (``predictor_stage.py``),
  ``toy-stage`` (``toy.py``);
- the stage list checked (``settings.py``), the worker pools items flow through (``flow.py``), the ``pipeline``
  framework that builds them (``predictor.py``);
- in a LoadGen run: the ``type: pipeline`` input (``input.py``), the pipeline SUT (``sut.py``), its calibration
  (``calibrate.py``), the per-stage records (``report.py``), the report's section (``plots.py``) and the kind's
  row (``kind.py``)."""
