"""Small ONNX classifiers with the input/output contracts of published image classifiers, for running their
manifests without the published files: the image is averaged per channel and the nearest colour of
:data:`mlharness.tasks.generic.synth.PALETTE` (after the manifest's ``(x - mean) / scale``) wins."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mlharness.tasks.generic.synth import CLASSES, PALETTE


def colour_logits(mean: Sequence[float], scale: Sequence[float], n_classes: int, first: int = 0
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Weights and bias of ``logits = pooled @ W + b`` that peak at ``first + CLASSES[k]`` for colour ``k``."""
    mu = (np.asarray(PALETTE, np.float64) - np.asarray(mean)) / np.asarray(scale)
    w = np.zeros((3, n_classes), np.float32)
    b = np.full(n_classes, -1e4, np.float32)
    for k, c in enumerate(CLASSES):
        w[:, first + c] = 2 * mu[k]
        b[first + c] = -float(mu[k] @ mu[k])
    return w, b


def write_classifier(path: Path | str, *, mean: Sequence[float], scale: Sequence[float] = (1.0, 1.0, 1.0),
                     size: int = 224, n_classes: int = 1000, background: bool = False,
                     input_name: str = "input", outputs: Sequence[str] = ("output",)) -> Path:
    """``outputs``: one name writes logits; two names write (ArgMax int64, softmax float32) as the MLPerf
    ResNet50 graph does. ``background`` adds class 0 in front (1001 scores)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n = n_classes + (1 if background else 0)
    w, b = colour_logits(mean, scale, n, 1 if background else 0)
    nodes = [helper.make_node("GlobalAveragePool", [input_name], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("MatMul", ["flat", "W"], ["mm"]),
             helper.make_node("Add", ["mm", "B"], ["logits" if len(outputs) > 1 else outputs[0]])]
    outs = []
    if len(outputs) > 1:
        nodes += [helper.make_node("ArgMax", ["logits"], [outputs[0]], axis=1, keepdims=0),
                  helper.make_node("Softmax", ["logits"], [outputs[1]], axis=1)]
        outs = [helper.make_tensor_value_info(outputs[0], TensorProto.INT64, ["N"]),
                helper.make_tensor_value_info(outputs[1], TensorProto.FLOAT, ["N", n])]
    else:
        outs = [helper.make_tensor_value_info(outputs[0], TensorProto.FLOAT, ["N", n])]
    graph = helper.make_graph(nodes, "colour_classifier",
                              [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["N", 3, size, size])],
                              outs, [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def write_torchscript_classifier(path: Path | str, *, mean: Sequence[float], scale: Sequence[float] = (1.0, 1.0, 1.0),
                                 n_classes: int = 1000) -> Path:
    """The same colour classifier as a TorchScript file (logits [N, n_classes] of a [N, 3, H, W] image)."""
    import torch

    w, b = colour_logits(mean, scale, n_classes)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.from_numpy(w))
            self.register_buffer("b", torch.from_numpy(b))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mean(dim=(2, 3)) @ self.w + self.b

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(Net()), str(path))
    return path
