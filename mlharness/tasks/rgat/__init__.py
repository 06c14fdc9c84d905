"""rgat: R-GAT node classification on IGBH, a heterogeneous graph given as a ``type: graph`` input
(``kinds/graph/input.py``): IGBH's processed layout at a tiny size, R-GAT in PyTorch Geometric, and the accuracy
as ``graph/R-GAT/tools/accuracy_igbh.py`` computes it."""

METRICS = {"igbh_accuracy": "mlharness.tasks.rgat.metric:IgbhAccuracyMetric"}
