"""The ImageNet oracle in PyTorch (TorchScript) and TensorFlow (SavedModel) form, with the ONNX oracle's exact
computation and weights, so one manifest runs it in three frameworks (``resnet50-oracle@pytorch``, ``@tensorflow``).

TensorFlow takes NHWC input like the MLPerf TF ResNet50; the graph restores the channel-major feature order
before the template match, so the scores equal the ONNX model's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from mlharness.tasks.files import atomic_write
from mlharness.tasks.imagenet.models import oracle_templates
from mlharness.tasks.imagenet.synth import CLASSES, CROP, GRID, MARGIN


def _weights() -> tuple[np.ndarray, np.ndarray]:
    """(templates [2002, 48] scaled like the ONNX Gemm, offsets [2002]) exactly as build_oracle_model makes them."""
    flat = oracle_templates().reshape(-1, 3 * GRID * GRID)
    weight = (2e-3 * flat).astype(np.float32)
    bias = (-1e-3 * (flat.astype(np.float64) ** 2).sum(axis=1)).astype(np.float32)
    bias[:2] = -1e6
    return weight, bias


def _torch_module():
    import torch

    weight, bias = _weights()
    cell = CROP // GRID

    class Oracle(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("weight", torch.from_numpy(weight))
            self.register_buffer("bias", torch.from_numpy(bias))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            inner = x[:, :, MARGIN:CROP - MARGIN, MARGIN:CROP - MARGIN]
            cells = torch.nn.functional.avg_pool2d(inner, kernel_size=cell - 2 * MARGIN, stride=cell)
            scores = torch.nn.functional.linear(cells.flatten(1), self.weight, self.bias)
            logits = scores.reshape(-1, CLASSES + 1, 2).amax(dim=2)
            return logits.argmax(dim=1), torch.softmax(logits, dim=1)

    return Oracle().eval()


def ensure_oracle_torchscript(path: Path) -> Path:
    """``model.generator``: the oracle as TorchScript (input NCHW float32, outputs (argmax int64, softmax))."""
    import torch

    path = Path(path)
    if path.is_file():
        return path
    module = _torch_module()
    example = torch.zeros(2, 3, CROP, CROP)
    with torch.no_grad():
        traced = torch.jit.trace(module, example)
    return atomic_write(path, traced.save, suffix=".pt")


def ensure_oracle_savedmodel(path: Path) -> Path:
    """``model.generator``: the oracle as a TF SavedModel folder; signature ``serving_default`` takes
    ``input_tensor`` [N, 224, 224, 3] and returns ``ArgMax`` and ``softmax_tensor``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    weight, bias = _weights()
    cell = CROP // GRID

    class Oracle(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = tf.constant(weight)
            self.bias = tf.constant(bias)

        @tf.function(input_signature=[tf.TensorSpec([None, CROP, CROP, 3], tf.float32, name="input_tensor")])
        def serve(self, input_tensor: tf.Tensor) -> dict[str, tf.Tensor]:
            inner = input_tensor[:, MARGIN:CROP - MARGIN, MARGIN:CROP - MARGIN, :]
            cells = tf.nn.avg_pool2d(inner, ksize=cell - 2 * MARGIN, strides=cell, padding="VALID")  # N,4,4,3
            features = tf.reshape(tf.transpose(cells, [0, 3, 1, 2]), [-1, 3 * GRID * GRID])  # channel-major
            scores = tf.matmul(features, self.weight, transpose_b=True) + self.bias
            logits = tf.reduce_max(tf.reshape(scores, [-1, CLASSES + 1, 2]), axis=2)
            return {"ArgMax": tf.argmax(logits, axis=1, output_type=tf.int64),
                    "softmax_tensor": tf.nn.softmax(logits, axis=1)}

    module = Oracle()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve})
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
