"""ImageNet / ResNet50-v1.5: the validation layout, reference pre-processing, synthetic set, oracle and random
models, and top-1 accuracy as ``accuracy-imagenet.py`` computes it."""

from mlharness.tasks.legacy import forward_to

METRICS = {"imagenet_top1": "mlharness.tasks.imagenet.metric:ImagenetTop1Metric"}

__getattr__ = forward_to(__name__, ("dataset", "metric"))  # hooks of the flat layout: `imagenet.read_val_map`
