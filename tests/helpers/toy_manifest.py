"""The smallest manifest that runs: four float inputs per sample from an inline dataset, a hook each way. Tests
that break one thing of a manifest start from :func:`toy_manifest` (the ``echo`` predictor needs no framework)."""

from __future__ import annotations

from typing import Any


def toy_manifest(framework: str = "echo", graph_path: str = "model.bin", count: int = 8,
                 **framework_fields: Any) -> dict[str, Any]:
    """A fresh dict each call, so a case may change it freely."""
    return {
        "name": "toy",
        "framework": {"name": framework, "version": "*", **framework_fields},
        "inputs": [{"name": "x", "element_type": "float32", "shape": [4]}],
        "outputs": [{"name": "y", "element_type": "float32"}],
        "model": {"graph_path": graph_path},
        "dataset": {"name": "toy_data", "init": f"def init(count):\n    return count or {count}\n"},
        "preprocess": "import numpy as np\n\n\ndef preprocess(ctx, index):\n    return np.full(4, index, np.float32)\n",
        "postprocess": "def postprocess(ctx, outputs):\n    return outputs[0]\n",
    }
