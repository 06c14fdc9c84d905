"""KiTS19 / 3D U-Net: the raw and prepared layouts (and the reference's), the reference pre-processing, the
sliding-window inference, synthetic cases with their oracle and random models, and DICE as ``accuracy_kits.py``."""

from mlharness.tasks.legacy import forward_to

METRICS = {"kits19_dice": "mlharness.tasks.kits19.metric:Kits19DiceMetric"}

__getattr__ = forward_to(__name__, ("dataset", "prepared", "metric"))  # hooks of the flat layout: `kits19.PreparedKits19`
