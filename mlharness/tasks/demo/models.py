"""The demo's "oracle" ONNX classifier: the nearest colour of the image's mean, among the colours the demo
dataset (:mod:`.dataset`) draws its classes in, so a correct pipeline scores exactly 100% top-1."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError
from mlharness.tasks.demo.dataset import DEMO_CLASSES, DEMO_COLORS, DEMO_MEAN, DEMO_SIZE
from mlharness.tasks.files import atomic_write_bytes, mark_generated, reuse_generated

log = logging.getLogger(__name__)


DEMO_OPSET = 17
DEMO_IR_VERSION = 8  # onnxruntime >= 1.14 loads IR 8; newer onnx writes 10+ by default, which old runtimes refuse
DEMO_RECIPE = f"mlharness demo oracle, opset {DEMO_OPSET}, IR {DEMO_IR_VERSION}"


def _build_demo_model():  # -> onnx.ModelProto
    """Nearest-colour classifier: mean colour x, logits_k = 2 c_k.x - |c_k|^2 (= |x|^2 - |x - c_k|^2)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    centres = DEMO_COLORS.astype(np.float32) / np.float32(255.0) - np.float32(DEMO_MEAN)  # pre-processed space
    weight = (2.0 * centres).astype(np.float32)  # [10, 3], used with transB=1
    bias = (-(centres**2).sum(axis=1)).astype(np.float32)  # [10]

    nodes = [
        helper.make_node("GlobalAveragePool", ["image"], ["pooled"], name="mean_colour"),
        helper.make_node("Flatten", ["pooled"], ["colour"], name="flatten", axis=1),
        helper.make_node("Gemm", ["colour", "weight", "bias"], ["logits"], name="nearest_colour", transB=1),
        helper.make_node("ArgMax", ["logits"], ["label"], name="argmax", axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "mlharness_demo_oracle",
        inputs=[helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, DEMO_SIZE, DEMO_SIZE])],
        outputs=[
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", DEMO_CLASSES]),
            helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"]),
        ],
        initializer=[numpy_helper.from_array(weight, "weight"), numpy_helper.from_array(bias, "bias")],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", DEMO_OPSET)],
        producer_name="mlharness",
        doc_string="mlharness demo: nearest-colour oracle classifier (100% top-1 on the demo dataset)",
    )
    model.ir_version = DEMO_IR_VERSION
    onnx.checker.check_model(model)
    return model


def ensure_demo_model(path: Path) -> Path:
    """Write the demo ONNX model to ``path`` unless a valid one is already there; atomic (temp + os.replace)."""
    path = Path(path)
    if reuse_generated(path, DEMO_RECIPE):
        return path
    import onnx

    if path.is_file():
        try:
            onnx.checker.check_model(onnx.load(str(path)))
            return mark_generated(path, DEMO_RECIPE)
        except Exception as e:  # noqa: BLE001 - any load/check failure means: rebuild it
            log.warning("rebuilding the demo model %s: %s", path, e)
    data = _build_demo_model().SerializeToString()
    try:
        atomic_write_bytes(path, data)
    except OSError as e:
        raise DatasetError(f"demo model: cannot write {path}: {e}") from e
    log.info("wrote the demo model to %s", path)
    return mark_generated(path, DEMO_RECIPE)
