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


def write_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["y"])],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def write_all(folder: Path) -> dict[str, Path]:
    """The affine model in every framework's format, in one folder."""
    return {
        "onnxruntime": write_onnx(folder / "affine.onnx"),
        "pytorch": write_torchscript(folder / "affine.pt"),
        "tensorflow": write_saved_model(folder / "affine_saved"),
    }


VARIANT_MANIFEST = """\
name: affine
framework: {name: onnxruntime}
inputs: [{name: x, element_type: float32, shape: [4]}]
outputs: [{name: y, element_type: float32, shape: [3]}]
model: {graph_path: affine.onnx}
frameworks:
  pytorch:
    framework: {name: pytorch}
    model: {graph_path: affine.pt}
  tensorflow:
    framework: {name: tensorflow}
    model: {graph_path: affine_saved}
batching: {max_batchsize: 4}
dataset:
  name: ramp
  init: |
    def init(count):
        return 24
preprocess: |
  import numpy as np
  def preprocess(ctx, index):
      ctx.setdefault("frameworks_seen", set()).add(ctx["framework"])
      return (np.arange(4, dtype=np.float32) + index) / 7.0
"""
