"""A system of stages, one item per sample: the pipeline input (``input.py``), the pipeline SUT (``sut.py``) and
the per-stage records (``report.py``); the stages themselves live in ``mlharness/pipeline/``."""
