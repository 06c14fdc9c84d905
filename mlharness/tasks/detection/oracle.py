"""Known-answer ONNX graphs with the detection models' interfaces, for the synthetic scenes of
:mod:`mlharness.tasks.detection.scenes`.

For every palette colour the graph marks the input pixels within the tolerance of that colour (the input is the
reference's RGB / 255 tensor), and takes the first and last marked row and column as the object's box in model
pixels: the ground truth, provided the pre-processing kept the geometry and the colours the reference keeps.
The graphs are plain ONNX (opset 13), built in milliseconds with the onnx helper API.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlharness.tasks.detection.scenes import PALETTE, SLOTS, TOLERANCE

OPSET = 13


def _const(name: str, value: np.ndarray):  # -> onnx.TensorProto
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value), name)


def slot_box_nodes(image: str, size: int) -> tuple[list, list]:
    """(nodes, initializers) computing ``boxes_xyxy`` [1, K, 4] (model pixels, float) and ``present`` [1, K]
    (1.0 where the colour occurs) from ``image`` [1, 3, size, size]."""
    from onnx import TensorProto, helper

    colours = (PALETTE / 255.0).astype(np.float32).reshape(1, SLOTS, 3, 1, 1)
    init = [
        _const("colours", colours),
        _const("tolerance", np.array(TOLERANCE / 255.0, np.float32)),
        _const("one", np.array(1, np.int64)),
        _const("axis1", np.array([1], np.int64)),
    ]
    n = helper.make_node
    nodes = [
        n("Unsqueeze", [image, "axis1"], ["x5"]),                            # [1, 1, 3, H, W]
        n("Sub", ["x5", "colours"], ["diff"]),                               # [1, K, 3, H, W]
        n("Abs", ["diff"], ["absdiff"]),
        n("ReduceMax", ["absdiff"], ["dist"], axes=[2], keepdims=0),          # [1, K, H, W]
        n("Less", ["dist", "tolerance"], ["hit"]),
        n("Cast", ["hit"], ["mask"], to=TensorProto.FLOAT),
        n("ReduceMax", ["mask"], ["rows"], axes=[3], keepdims=0),             # [1, K, H]
        n("ReduceMax", ["mask"], ["cols"], axes=[2], keepdims=0),             # [1, K, W]
        n("ReduceMax", ["rows"], ["present"], axes=[2], keepdims=0),          # [1, K]
        n("ArgMax", ["rows"], ["y0i"], axis=2, keepdims=1),                   # first marked row
        n("ArgMax", ["rows"], ["y1l"], axis=2, keepdims=1, select_last_index=1),
        n("ArgMax", ["cols"], ["x0i"], axis=2, keepdims=1),
        n("ArgMax", ["cols"], ["x1l"], axis=2, keepdims=1, select_last_index=1),
        n("Add", ["y1l", "one"], ["y1i"]),                                    # exclusive end
        n("Add", ["x1l", "one"], ["x1i"]),
        n("Concat", ["x0i", "y0i", "x1i", "y1i"], ["boxes_i"], axis=2),       # [1, K, 4]
        n("Cast", ["boxes_i"], ["boxes_xyxy"], to=TensorProto.FLOAT),
    ]
    return nodes, init


def _model(nodes: list, init: list, inputs: list, outputs: list, name: str, doc: str):  # -> onnx.ModelProto
    from onnx import checker, helper

    graph = helper.make_graph(nodes, name, inputs, outputs, init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="mlharness", doc_string=doc)
    model.ir_version = 8
    checker.check_model(model)
    return model


def retinanet_oracle(size: int, slot_labels: Sequence[int], doc: str):  # -> onnx.ModelProto
    """The MLPerf RetinaNet ONNX interface: ``images`` [1, 3, size, size] -> ``boxes`` [N, 4] (xmin, ymin,
    xmax, ymax in model pixels), ``scores`` [N], ``labels`` [N] (int64), highest score first."""
    from onnx import TensorProto, helper

    nodes, init = slot_box_nodes("images", size)
    init += [_const("slot_labels", np.asarray(slot_labels, np.int64)), _const("k", np.array([SLOTS], np.int64)),
             _const("axis0", np.array([0], np.int64))]
    n = helper.make_node
    nodes += [
        n("Squeeze", ["boxes_xyxy", "axis0"], ["all_boxes"]),                 # [K, 4]
        n("Squeeze", ["present", "axis0"], ["all_scores"]),                   # [K]
        n("TopK", ["all_scores", "k"], ["scores", "order"], axis=0, largest=1, sorted=1),
        n("Gather", ["all_boxes", "order"], ["boxes"], axis=0),
        n("Gather", ["slot_labels", "order"], ["labels"], axis=0),
    ]
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])]
    outputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [SLOTS, 4]),
               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [SLOTS]),
               helper.make_tensor_value_info("labels", TensorProto.INT64, [SLOTS])]
    return _model(nodes, init, inputs, outputs, "retinanet_oracle", doc)


def yolo_oracle(size: int, slot_classes: Sequence[int], doc: str, classes: int = 80):  # -> onnx.ModelProto
    """The Ultralytics YOLO ONNX export interface: ``images`` [1, 3, size, size] -> ``output0``
    [1, 4 + classes, anchors] (cx, cy, w, h in model pixels, then per-class scores); slot k answers at anchor
    k, every other anchor scores 0."""
    from onnx import TensorProto, helper

    anchors = yolo_anchors(size)
    onehot = np.zeros((1, SLOTS, classes), np.float32)
    onehot[0, np.arange(SLOTS), np.asarray(slot_classes)] = 1.0
    to_cxcywh = np.array([[0.5, 0, -1, 0], [0, 0.5, 0, -1], [0.5, 0, 1, 0], [0, 0.5, 0, 1]], np.float32)
    nodes, init = slot_box_nodes("images", size)
    init += [_const("onehot", onehot), _const("to_cxcywh", to_cxcywh), _const("axis2", np.array([2], np.int64)),
             _const("pad", np.zeros((1, 4 + classes, anchors - SLOTS), np.float32))]
    n = helper.make_node
    nodes += [
        n("MatMul", ["boxes_xyxy", "to_cxcywh"], ["cxcywh"]),                # [1, K, 4]
        n("Unsqueeze", ["present", "axis2"], ["present3"]),                   # [1, K, 1]
        n("Mul", ["present3", "onehot"], ["cls"]),                            # [1, K, classes]
        n("Concat", ["cxcywh", "cls"], ["per_slot"], axis=2),                 # [1, K, 4 + classes]
        n("Transpose", ["per_slot"], ["slots_t"], perm=[0, 2, 1]),            # [1, 4 + classes, K]
        n("Concat", ["slots_t", "pad"], ["output0"], axis=2),
    ]
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + classes, anchors])]
    return _model(nodes, init, inputs, outputs, "yolo_oracle", doc)


def yolo_anchors(size: int) -> int:
    """Anchor points of a YOLOv8/11 head at strides 8, 16 and 32 (8400 for 640)."""
    return sum((size // s) ** 2 for s in (8, 16, 32))
