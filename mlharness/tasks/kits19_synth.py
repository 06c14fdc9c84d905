"""Synthetic KiTS19: CT-like NIfTI cases, an oracle segmentation model with a known answer, a random 3D U-Net.

Cases are written in the KiTS19 layout (``case_XXXXX/imaging.nii.gz`` int16 HU, ``segmentation.nii.gz`` uint8)
with anisotropic spacings, odd sizes and KiTS-like affines.  Each holds a body (40 HU) in air, two kidneys
(170 HU) placed asymmetrically and a tumor (285 HU) inside one of them, with noise.  The edges after resampling
cycle through every branch of the reference's pre-processing: shorter than the window (edge-padded), a few voxels
above a multiple of 64 (cropped), and well above one (constant-padded to the next multiple).

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
ReLU; widths 32, 64, 128, 256, 320 at full size (``width`` 32, ``depth`` 4).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError
from mlharness.tasks._files import atomic_write_bytes

log = logging.getLogger(__name__)

OPSET = 17
IR_VERSION = 8  # loadable by onnxruntime >= 1.14
ROI = 128
HU = {"air": -1000.0, "body": 40.0, "kidney": 170.0, "tumor": 285.0}
NOISE_HU = 8.0
# Edges (D, H, W) after resampling to 1.6 x 1.2 x 1.2 mm, cycled over the cases: 128^3 after padding/cropping;
# (128, 192, 128); (128, 192, 192); (192, 128, 192).
TARGET_EDGES = ((118, 140, 131), (150, 176, 140), (100, 186, 197), (166, 129, 161))
_TARGET_SPACING = (1.6, 1.2, 1.2)


def _ellipsoid(grid: list[np.ndarray], centre: np.ndarray, semi: np.ndarray) -> np.ndarray:
    return sum(((g - c) / s) ** 2 for g, c, s in zip(grid, centre, semi, strict=True)) <= 1.0


def synthetic_case(index: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(imaging int16 HU, segmentation uint8, affine) of case ``index``; deterministic in (index, seed)."""
    rng = np.random.default_rng([seed, index])
    sz = rng.uniform(2.4, 3.2)
    sy = rng.uniform(0.95, 1.1)
    spacing = np.array([sz, sy, sy * rng.uniform(0.92, 1.08)])
    target = TARGET_EDGES[index % len(TARGET_EDGES)]
    shape = tuple(max(8, round(t * ts / s)) for t, ts, s in zip(target, _TARGET_SPACING, spacing, strict=True))
    extent = np.array(shape) * spacing
    grid = list(np.ogrid[tuple(slice(0, n) for n in shape)])
    grid = [(g + 0.5) * s for g, s in zip(grid, spacing, strict=True)]  # voxel centres in mm

    label = np.zeros(shape, dtype=np.uint8)
    image = np.full(shape, HU["air"], dtype=np.float32)
    body = _ellipsoid(grid[1:], extent[1:] / 2, extent[1:] * 0.47)
    image[np.broadcast_to(body, shape)] = HU["body"]
    jitter = rng.uniform(-0.03, 0.03, size=(2, 3))
    k1_centre = (np.array([0.42, 0.45, 0.35]) + jitter[0]) * extent
    k1_semi = np.array([30.0, 26.0, 23.0]) * rng.uniform(0.92, 1.08)
    k2_centre = (np.array([0.60, 0.57, 0.66]) + jitter[1]) * extent
    k2_semi = np.array([26.0, 22.0, 20.0]) * rng.uniform(0.92, 1.08)
    for centre, semi in ((k1_centre, k1_semi), (k2_centre, k2_semi)):
        label[_ellipsoid(grid, centre, semi)] = 1
    tumor_centre = k1_centre + np.array([0.3, -0.25, 0.25]) * k1_semi
    label[_ellipsoid(grid, tumor_centre, np.full(3, 0.58 * k1_semi.min()))] = 2
    image[label == 1] = HU["kidney"]
    image[label == 2] = HU["tumor"]
    image += rng.normal(0.0, NOISE_HU, size=shape).astype(np.float32)

    # KiTS-like orientation: voxel axis 0 (slices) runs along world z, reversed axes; every other case is plain.
    if index % 2 == 0:
        affine = np.array([[0, 0, -spacing[2], 180.0], [0, -spacing[1], 0, 200.0], [-spacing[0], 0, 0, 0.0],
                           [0, 0, 0, 1]])
    else:
        affine = np.diag([*spacing, 1.0])
    return np.clip(np.rint(image), -1024, 3071).astype(np.int16), label, affine


def write_dataset(out: Path, count: int, seed: int = 0) -> list[str]:
    """Write ``count`` cases ``case_00000``... into ``out`` (a KiTS19 ``data`` folder); returns their ids."""
    import nibabel

    if count < 1:
        raise DatasetError(f"synthetic KiTS19: count must be >= 1, got {count}")
    out = Path(out)
    cases = []
    for index in range(count):
        image, label, affine = synthetic_case(index, seed)
        case = f"case_{index:05d}"
        folder = out / case
        folder.mkdir(parents=True, exist_ok=True)
        # segmentation first: a case counts as present once imaging.nii.gz exists
        nibabel.save(nibabel.Nifti1Image(label, affine), str(folder / "segmentation.nii.gz"))
        nibabel.save(nibabel.Nifti1Image(image, affine), str(folder / "imaging.nii.gz"))
        cases.append(case)
        log.info("%s: shape %s", case, image.shape)
    return cases


# -- models -------------------------------------------------------------------------------------------------
def _save(model, path: Path) -> Path:  # noqa: ANN001 - onnx.ModelProto
    import onnx

    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return atomic_write_bytes(path, model.SerializeToString())


def _valid(path: Path) -> bool:
    import onnx

    if not Path(path).is_file():
        return False
    try:
        onnx.checker.check_model(str(path))
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
    return Path(path) if _valid(path) else _save(build_oracle_model(), path)


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
    if _valid(path):
        return path
    log.info("building a random 3D U-Net (width %d, depth %d) at %s", width, depth, path)
    return _save(build_random_unet(width, depth), path)
