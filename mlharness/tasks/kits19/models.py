"""Models for the synthetic KiTS19 cases (:mod:`.synth`): the ``model.generator`` functions of the 3D U-Net
manifests.

The oracle model has the real model's I/O ((N, 1, 128, 128, 128) -> (N, 3, 128, 128, 128) logits).  Its logits
are the signed distance of the normalised intensity to each class's band (so the pipeline scores a DICE close to
1 when resampling, normalisation, windowing and un-padding are right), minus a penalty on the kidney and tumor
logits near the patch faces, like a real network's weaker borders.  The Gaussian importance map makes the
overlapping windows outvote those borders; a plain average of the windows does not, so broken window weighting
costs DICE where patches overlap.  Organs are kept away from the volume's outer faces, where every weighting sees
the penalty.

The random U-Net follows the MLPerf reference architecture (mlcommons/training image_segmentation, used for the
inference model): input block, ``depth`` stride-2 down-sampling blocks, a bottleneck, transposed-convolution
up-sampling blocks with skip connections, 1x1x1 output convolution; 3x3x3 convolutions with instance norm and
ReLU; widths 32, 64, 128, 256, 320 at full size (``width`` 32, ``depth`` 4)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from mlharness.tasks.files import atomic_write_bytes, mark_generated, reuse_generated
from mlharness.tasks.kits19.synth import HU

OPSET = 17
IR_VERSION = 8  # loadable by onnxruntime >= 1.14
ROI = 128

log = logging.getLogger(__name__)


def _save(model, path: Path) -> Path:  # noqa: ANN001 - onnx.ModelProto
    import onnx

    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return atomic_write_bytes(path, model.SerializeToString())


def _valid(path: Path, recipe: str) -> bool:
    """Stamped as written for ``recipe``, or a model that passes onnx's checker (then stamped)."""
    if reuse_generated(path, recipe):
        return True
    import onnx

    if not Path(path).is_file():
        return False
    try:
        onnx.checker.check_model(str(path))
        mark_generated(path, recipe)
        return True
    except Exception as e:  # noqa: BLE001 - unreadable or invalid: rebuild
        log.warning("rebuilding %s: %s", path, e)
        return False


def _normalised(hu: float) -> float:
    return (hu - 101.0) / 76.9  # the reference's normalisation


# oracle parameters: class bands (in normalised units) half-way between the tissue intensities
ORACLE_GAIN = 4.0
ORACLE_EDGE_BAND = 24  # voxels from a patch face where the penalty applies
ORACLE_PENALTY = 20.0  # logit penalty at a patch face, in the band it decays as (1 - d / band)^2
ORACLE_RECIPE = (f"mlharness KiTS19 oracle, gain {ORACLE_GAIN}, edge band {ORACLE_EDGE_BAND}, penalty {ORACLE_PENALTY}, "
                 f"opset {OPSET}")


def build_oracle_model():  # -> onnx.ModelProto
    from onnx import TensorProto, helper, numpy_helper

    a = _normalised((HU["body"] + HU["kidney"]) / 2)
    b = _normalised((HU["kidney"] + HU["tumor"]) / 2)
    cap = (b - a) / 2
    # logit_c = gain * clip(min(p_c, q_c), -cap, cap): the signed distance of z to class c's band
    p_w, p_b = np.array([-1.0, 1.0, 1.0]), np.array([a, -a, -b])
    q_w, q_b = np.array([0.0, -1.0, 0.0]), np.array([cap, b, cap])
    d = np.minimum(np.arange(ROI), ROI - 1 - np.arange(ROI)).astype(np.float64)
    edge = np.clip(1.0 - d / ORACLE_EDGE_BAND, 0.0, None) ** 2
    f32 = np.float32
    inits = [
        numpy_helper.from_array((ORACLE_GAIN * p_w).reshape(3, 1, 1, 1, 1).astype(f32), "p_w"),
        numpy_helper.from_array((ORACLE_GAIN * p_b).astype(f32), "p_b"),
        numpy_helper.from_array((ORACLE_GAIN * q_w).reshape(3, 1, 1, 1, 1).astype(f32), "q_w"),
        numpy_helper.from_array((ORACLE_GAIN * q_b).astype(f32), "q_b"),
        numpy_helper.from_array(np.array(-ORACLE_GAIN * cap, dtype=f32), "lo"),
        numpy_helper.from_array(np.array(ORACLE_GAIN * cap, dtype=f32), "hi"),
        numpy_helper.from_array(edge.reshape(1, 1, ROI, 1, 1).astype(f32), "edge_d"),
        numpy_helper.from_array(edge.reshape(1, 1, 1, ROI, 1).astype(f32), "edge_h"),
        numpy_helper.from_array(edge.reshape(1, 1, 1, 1, ROI).astype(f32), "edge_w"),
        numpy_helper.from_array(np.array([0, -ORACLE_PENALTY, -ORACLE_PENALTY], dtype=f32).reshape(1, 3, 1, 1, 1),
                                "penalty"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "p_w", "p_b"], ["p"], kernel_shape=[1, 1, 1]),
        helper.make_node("Conv", ["input", "q_w", "q_b"], ["q"], kernel_shape=[1, 1, 1]),
        helper.make_node("Min", ["p", "q"], ["dist"]),
        helper.make_node("Clip", ["dist", "lo", "hi"], ["clean"]),
        helper.make_node("Add", ["edge_d", "edge_h"], ["edge_dh"]),
        helper.make_node("Add", ["edge_dh", "edge_w"], ["edge"]),
        helper.make_node("Mul", ["edge", "penalty"], ["border"]),
        helper.make_node("Add", ["clean", "border"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes, "kits19_oracle",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch_size", 1, ROI, ROI, ROI])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch_size", 3, ROI, ROI, ROI])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="mlharness",
                             doc_string="KiTS19 oracle: intensity bands with weak patch borders")


def ensure_oracle_model(path: Path) -> Path:
    """Model generator for ``3d-unet-oracle``: writes the oracle unless a valid one is at ``path``."""
    if _valid(path, ORACLE_RECIPE):
        return Path(path)
    return mark_generated(_save(build_oracle_model(), path), ORACLE_RECIPE)


def unet_widths(width: int = 32, depth: int = 4) -> list[int]:
    """Channel widths per level: doubling from ``width``, capped at 10x (32 -> 32, 64, 128, 256, 320)."""
    if width < 1 or depth < 1:
        raise ValueError(f"width and depth must be >= 1, got {width}, {depth}")
    return [min(width * 2**i, width * 10) for i in range(depth + 1)]


def build_random_unet(width: int = 32, depth: int = 4, seed: int = 0, classes: int = 3):  # -> onnx.ModelProto
    """The reference 3D U-Net with random weights (He-normal convolutions, instance norm near identity)."""
    from onnx import TensorProto, helper, numpy_helper

    if ROI % 2 ** (depth + 1):
        raise ValueError(f"depth {depth} halves a {ROI}^3 patch {depth + 1} times: not a whole number of voxels")
    rng = np.random.default_rng(seed)
    widths = unet_widths(width, depth)
    inits, nodes = [], []
    counter = iter(range(1_000_000))

    def param(array: np.ndarray, kind: str) -> str:
        name = f"{kind}_{next(counter)}"
        inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv_block(x: str, cin: int, cout: int, stride: int = 1) -> str:
        w = rng.normal(0.0, np.sqrt(2.0 / (cin * 27)), size=(cout, cin, 3, 3, 3))
        y = f"conv_{next(counter)}"
        nodes.append(helper.make_node("Conv", [x, param(w, "w")], [y], kernel_shape=[3, 3, 3],
                                      pads=[1] * 6, strides=[stride] * 3))
        scale, bias = param(1.0 + 0.1 * rng.standard_normal(cout), "g"), param(0.1 * rng.standard_normal(cout), "b")
        n = f"norm_{next(counter)}"
        nodes.append(helper.make_node("InstanceNormalization", [y, scale, bias], [n], epsilon=1e-5))
        out = f"relu_{next(counter)}"
        nodes.append(helper.make_node("Relu", [n], [out]))
        return out

    x = conv_block(conv_block("input", 1, widths[0]), widths[0], widths[0])
    skips = [x]
    for cin, cout in zip(widths[:-1], widths[1:], strict=True):
        x = conv_block(conv_block(x, cin, cout, stride=2), cout, cout)
        skips.append(x)
    x = conv_block(conv_block(x, widths[-1], widths[-1], stride=2), widths[-1], widths[-1])  # bottleneck
    ups = [(widths[-1], widths[-1]), *zip(reversed(widths[1:]), reversed(widths[:-1]), strict=True)]
    for (cin, cout), skip in zip(ups, reversed(skips), strict=True):
        w = rng.normal(0.0, np.sqrt(1.0 / (cin * 8)), size=(cin, cout, 2, 2, 2))
        up = f"up_{next(counter)}"
        nodes.append(helper.make_node("ConvTranspose", [x, param(w, "w"), param(np.zeros(cout), "b")], [up],
                                      kernel_shape=[2, 2, 2], strides=[2, 2, 2]))
        cat = f"cat_{next(counter)}"
        nodes.append(helper.make_node("Concat", [up, skip], [cat], axis=1))
        x = conv_block(conv_block(cat, 2 * cout, cout), cout, cout)
    w = rng.normal(0.0, np.sqrt(1.0 / widths[0]), size=(classes, widths[0], 1, 1, 1))
    nodes.append(helper.make_node("Conv", [x, param(w, "w"), param(np.zeros(classes), "b")], ["output"],
                                  kernel_shape=[1, 1, 1]))
    graph = helper.make_graph(
        nodes, f"unet3d_random_w{width}_d{depth}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch_size", 1, ROI, ROI, ROI])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch_size", classes, ROI, ROI, ROI])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="mlharness",
                             doc_string=f"random-weight 3D U-Net (MLPerf KiTS19 architecture), widths {widths}")


_KNOBS = re.compile(r"_w(\d+)_d(\d+)")


def ensure_random_unet(path: Path) -> Path:
    """Model generator for ``3d-unet-random``: full size, unless the file name asks for a smaller variant with
    ``_w<width>_d<depth>`` (e.g. ``unet3d_random_w4_d2.onnx``)."""
    path = Path(path)
    m = _KNOBS.search(path.stem)
    width, depth = (int(m.group(1)), int(m.group(2))) if m else (32, 4)
    recipe = f"mlharness random 3D U-Net, width {width}, depth {depth}, seed 0"
    if _valid(path, recipe):
        return path
    log.info("building a random 3D U-Net (width %d, depth %d) at %s", width, depth, path)
    return mark_generated(_save(build_random_unet(width, depth), path), recipe)
