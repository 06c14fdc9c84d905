"""The ImageNet oracle and the random ResNet50: the ``model.generator`` functions of the ResNet50 manifests.

The oracle ONNX model has the MLPerf ResNet50's interface (``input_tensor:0`` [N, 3, 224, 224] -> ``ArgMax:0``,
``softmax_tensor:0`` over 1001 classes, class 0 = background, so label = argmax - 1). It average-pools the
inside of each cell of the pre-processed tensor (the synthetic images of :mod:`mlharness.tasks.imagenet.synth`)
and picks the class whose expected cell values (the palette colour minus the reference mean, in RGB order) are
nearest: 100% top-1 exactly when pre-processing matches the reference. Every palette colour has R and B at least
100 levels apart and the palette is closed under swapping R and B, so feeding BGR turns every colour image into
a *different* class; without the mean subtraction every cell lands near a brighter palette entry, again a
different class.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mlharness.errors import AssetError
from mlharness.fileguard import check_regular_file, read_bytes_bounded
from mlharness.tasks.imagenet.preprocess import IMAGENET_MEAN_RGB
from mlharness.tasks.imagenet.resnet50_onnx import (  # noqa: F401 - ensure_random_resnet50 is a manifest generator
    ARGMAX_NAME,
    INPUT_NAME,
    SOFTMAX_NAME,
    classifier_model,
    ensure_random_resnet50,
    save_model,
)
from mlharness.tasks.imagenet.synth import CLASSES, CROP, GRID, MARGIN, ORACLE_DOC, colour_cells, gray_cells


def oracle_templates() -> np.ndarray:
    """[1001, 2, 48]: for each class (0 = background, then label + 1) the pooled features a colour and a gray
    image of it produce after reference pre-processing (cell value - mean, RGB, channel-major like Flatten)."""
    mean = np.asarray(IMAGENET_MEAN_RGB, dtype=np.float32)
    t = np.zeros((CLASSES + 1, 2, 3 * GRID * GRID), np.float32)
    for label in range(CLASSES):
        for k, cells in enumerate((colour_cells(label), gray_cells(label))):
            t[label + 1, k] = (cells - mean).T.reshape(-1)  # [3, 16] -> channel-major
    return t


def build_oracle_model():  # -> onnx.ModelProto
    """Slice off the cell margins, average-pool each cell, nearest template by Gemm (2 t.x - |t|^2), max over a
    class's two templates, softmax and ArgMax. Logits are scaled by 1e-3 to keep the softmax readable."""
    from onnx import helper, numpy_helper

    t = oracle_templates()  # [1001, 2, 48]
    flat = t.reshape(-1, t.shape[-1])
    weight = (2e-3 * flat).astype(np.float32)
    bias = (-1e-3 * (flat.astype(np.float64) ** 2).sum(axis=1)).astype(np.float32)
    bias[:2] = -1e6  # class 0 (background) never wins
    cell = CROP // GRID
    init = [
        numpy_helper.from_array(np.array([MARGIN, MARGIN], np.int64), "starts"),
        numpy_helper.from_array(np.array([CROP - MARGIN, CROP - MARGIN], np.int64), "ends"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
        numpy_helper.from_array(weight, "templates"),
        numpy_helper.from_array(bias, "offsets"),
        numpy_helper.from_array(np.array([-1, CLASSES + 1, 2], np.int64), "per_class"),
    ]
    nodes = [
        helper.make_node("Slice", [INPUT_NAME, "starts", "ends", "axes"], ["inner"], name="drop_margins"),
        helper.make_node("AveragePool", ["inner"], ["cells"], name="cell_means",
                         kernel_shape=[cell - 2 * MARGIN] * 2, strides=[cell, cell]),
        helper.make_node("Flatten", ["cells"], ["features"], name="flatten", axis=1),
        helper.make_node("Gemm", ["features", "templates", "offsets"], ["scores"], name="nearest", transB=1),
        helper.make_node("Reshape", ["scores", "per_class"], ["scores3"], name="per_class"),
        helper.make_node("ReduceMax", ["scores3"], ["logits"], name="best_template", axes=[2], keepdims=0),
        helper.make_node("Softmax", ["logits"], [SOFTMAX_NAME], name="softmax", axis=1),
        helper.make_node("ArgMax", ["logits"], [ARGMAX_NAME], name="argmax", axis=1, keepdims=0),
    ]
    return classifier_model(nodes, init, "imagenet_oracle", CLASSES + 1, ORACLE_DOC)


def ensure_oracle_model(path: Path) -> Path:
    """``model.generator`` hook: write the oracle model unless an identical one is already at ``path``."""
    path = Path(path)
    data = build_oracle_model().SerializeToString()  # ~0.4 MB, built in milliseconds: compare, don't trust
    if os.path.lexists(path):  # a FIFO or folder there is not a model mlharness wrote: never replaced
        check_regular_file(path, "oracle model", error=AssetError)
        if os.path.getsize(path) == len(data) and read_bytes_bounded(path, "oracle model", len(data),
                                                                      error=AssetError) == data:
            return path
    import onnx

    return save_model(onnx.load_from_string(data), path)
