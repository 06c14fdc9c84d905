"""Tiny real models with known weights in each framework's native formats, for predictor tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

W = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0], [2.0, 0.0, 1.5], [-0.5, 1.0, 0.0]], dtype=np.float32)
B = np.array([0.1, -0.2, 0.3], dtype=np.float32)


def expected(x: np.ndarray) -> np.ndarray:
    return x @ W + B


def torch_module():
    import torch

    lin = torch.nn.Linear(4, 3)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(W.T.copy()))
        lin.bias.copy_(torch.from_numpy(B))
    return lin.eval()


def write_torchscript(path: Path) -> Path:
    import torch

    torch.jit.trace(torch_module(), torch.zeros(2, 4)).save(str(path))
    return path


def write_torch_export(path: Path) -> Path:
    import torch

    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(torch_module(), (torch.zeros(2, 4),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))
    return path


def write_factory(folder: Path) -> tuple[str, Path]:
    """A module file defining ``build(out_features=3)`` and a state dict for it; returns (factory, weights)."""
    import torch

    (folder / "tiny_factory.py").write_text(textwrap.dedent("""\
        import torch

        def build(out_features=3):
            return torch.nn.Linear(4, out_features)
    """))
    weights = folder / "tiny.pth"
    torch.save(torch_module().state_dict(), weights)
    return "tiny_factory:build", weights


def write_saved_model(path: Path) -> Path:
    import tensorflow as tf

    class Affine(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(W)
            self.b = tf.Variable(B)

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.matmul(x, self.w) + self.b}

    m = Affine()
    tf.saved_model.save(m, str(path), signatures={"serving_default": m.serve})
    return path


def write_frozen_graph(path: Path) -> Path:
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    w, b = tf.Variable(W), tf.Variable(B)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(x):
        return tf.identity(tf.matmul(x, w) + b, name="y")

    frozen = convert_variables_to_constants_v2(serve.get_concrete_function())
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    return path
