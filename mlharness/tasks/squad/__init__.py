"""SQuAD v1.1 / BERT-Large: features as the reference builds them, the reference post-processing, the official
v1.1 evaluation, the synthetic set and its oracle and random models."""

from mlharness.tasks.legacy import forward_to

METRICS = {"squad_v1.1": "mlharness.tasks.squad.metric:SquadMetric"}

__getattr__ = forward_to(__name__, ("dataset", "metric"))  # hooks of the flat layout: `squad.dataset_features`
