"""The embedded demo: an ImageNet-shaped synthetic set and an oracle classifier, scored by ``imagenet_top1``."""

from mlharness.tasks.legacy import forward_to

__getattr__ = forward_to(__name__, ("dataset", "models"))  # hooks of the flat layout: `demo.preprocess_demo`
