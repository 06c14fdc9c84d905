"""Synthetic ImageNet in the official layout, and an "oracle" ResNet50 stand-in that reads its labels exactly.

Each image carries its label as a 4x4 grid of coloured cells covering exactly the region the reference center
crop keeps (the central ``224/256`` of the short side), drawn over a noisy background in a random size and
aspect ratio (odd, portrait, landscape, smaller than 256 so it is up-scaled, multiples of 256 for OpenCV's
integer-ratio INTER_AREA path). Some images are grayscale JPEGs and some CMYK JPEGs, which OpenCV decodes to
3-channel BGR like the reference.

The oracle ONNX model has the MLPerf ResNet50's interface (``input_tensor:0`` [N, 3, 224, 224] -> ``ArgMax:0``,
``softmax_tensor:0`` over 1001 classes, class 0 = background, so label = argmax - 1). It average-pools the
inside of each cell of the pre-processed tensor and picks the class whose expected cell values (the palette
colour minus the reference mean, in RGB order) are nearest: 100% top-1 exactly when pre-processing matches the
reference. Every palette colour has R and B at least 100 levels apart and the palette is closed under swapping
R and B, so feeding BGR turns every colour image into a *different* class; without the mean subtraction every
cell lands near a brighter palette entry, again a different class.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError
from mlharness.tasks.resnet50_onnx import (  # noqa: F401 - ensure_random_resnet50 is a manifest generator
    ARGMAX_NAME,
    INPUT_NAME,
    SOFTMAX_NAME,
    classifier_model,
    ensure_random_resnet50,
    save_model,
)
from mlharness.tasks.vision import IMAGENET_MEAN_RGB

log = logging.getLogger(__name__)

NAME_FORMAT = "ILSVRC2012_val_%08d.JPEG"  # 1-based, like the validation set
VAL_MAP = "val_map.txt"
CLASSES = 1000
GRID = 4  # cells per side of the code
CROP = 224
MARGIN = 8  # pixels of each 56-pixel cell the oracle ignores at every edge (resize/crop misalignment, JPEG bleed)
LEVELS = (30, 130, 230)
# 18 colours: R != B always (so an R/B swap changes every cell), closed under the swap.
PALETTE = np.array([(r, g, b) for r in LEVELS for g in LEVELS for b in LEVELS if r != b], dtype=np.float32)
GRAY_LEVELS = np.array([20, 72, 124, 176, 228], dtype=np.float32)
# Which digit of the label each of the 16 cells shows: 3 base-18 digits for colour (each digit in >= 5 cells, so
# two labels differ in >= 5 cells), 5 base-5 digits for gray (>= 3 cells each).
COLOUR_DIGITS = (0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0)
GRAY_DIGITS = tuple(k % 5 for k in range(GRID * GRID))
NOISE = 20
ORACLE_DOC = "mlharness: ImageNet oracle (colour-grid decoder), 1001 classes"


def label_of(index: int) -> int:
    """Label of 0-based sample ``index``: a bijection on every run of 1000 consecutive indices."""
    return (index * 7919 + 11) % CLASSES


def kind_of(index: int) -> str:
    """``gray``, ``cmyk`` or ``rgb``: which JPEG flavour sample ``index`` is written as."""
    if index % 13 == 5:
        return "gray"
    if index % 17 == 3:
        return "cmyk"
    return "rgb"


def _digits(label: int, base: int, n: int) -> list[int]:
    return [(label // base**k) % base for k in range(n)]


def colour_cells(label: int) -> np.ndarray:
    """[16, 3] RGB of each cell (row-major) for a colour image of ``label``."""
    d = _digits(label, len(PALETTE), 3)
    return PALETTE[[d[k] for k in COLOUR_DIGITS]]


def gray_cells(label: int) -> np.ndarray:
    """[16, 3] (R = G = B) of each cell for a grayscale image of ``label``."""
    d = _digits(label, len(GRAY_LEVELS), 5)
    return np.repeat(GRAY_LEVELS[[d[k] for k in GRAY_DIGITS]][:, None], 3, axis=1)


# Sizes exercising particular resize paths, used for every 25th image: square at the target, exact 2x and 3x
# reductions (OpenCV's integer-ratio INTER_AREA code), short sides below 256 (up-scaling), odd sizes.
SPECIAL_SIZES = ((256, 256), (512, 768), (900, 768), (200, 331), (301, 257), (143, 401), (417, 251))


def image_size(index: int, rng: np.random.Generator) -> tuple[int, int]:
    """(height, width) of sample ``index``."""
    if index % 25 == 7:
        return SPECIAL_SIZES[(index // 25) % len(SPECIAL_SIZES)]
    short = int(rng.integers(120, 480))
    long = int(short * rng.uniform(1.0, 1.7))
    return (long, short) if rng.random() < 0.4 else (short, long)


def synth_image(index: int, seed: int = 0) -> tuple[np.ndarray, str]:
    """(HxWx3 uint8 RGB, kind) for sample ``index``; deterministic in (seed, index)."""
    rng = np.random.default_rng((seed, index))
    label, kind = label_of(index), kind_of(index)
    h, w = image_size(index, rng)
    img = np.empty((h, w, 3), np.float32)
    img[:] = rng.integers(0, 256, size=3)  # background, cropped away
    cells = gray_cells(label) if kind == "gray" else colour_cells(label)
    side = min(h, w) * CROP / 256.0  # the part of the image the reference's center crop keeps
    top, left = (h - side) / 2.0, (w - side) / 2.0
    edges_y = [int(round(top + side * k / GRID)) for k in range(GRID + 1)]
    edges_x = [int(round(left + side * k / GRID)) for k in range(GRID + 1)]
    for i in range(GRID):
        for j in range(GRID):
            img[edges_y[i]:edges_y[i + 1], edges_x[j]:edges_x[j + 1]] = cells[i * GRID + j]
    noise = rng.integers(-NOISE, NOISE + 1, size=(h, w, 1 if kind == "gray" else 3))
    return np.clip(img + noise, 0, 255).astype(np.uint8), kind


def write_image(path: Path, index: int, seed: int = 0) -> None:
    from PIL import Image

    rgb, kind = synth_image(index, seed)
    im = Image.fromarray(rgb, "RGB")
    if kind == "gray":
        im = im.convert("L")
    elif kind == "cmyk":
        im = im.convert("CMYK")
    quality = 80 + (index * 7) % 16
    im.save(path, format="JPEG", quality=quality)


def write_synthetic_imagenet(out: Path | str, count: int, seed: int = 0, workers: int | None = None) -> Path:
    """``count`` JPEGs named like the validation set plus ``val_map.txt`` (written last) into ``out``."""
    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic ImageNet: count must be >= 1, got {count}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / VAL_MAP).unlink(missing_ok=True)  # the val map declares the set complete: only at the end
        with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:  # PIL's encoder releases the GIL
            list(pool.map(lambda i: write_image(out / (NAME_FORMAT % (i + 1)), i, seed), range(count)))
        lines = "".join(f"{NAME_FORMAT % (i + 1)} {label_of(i)}\n" for i in range(count))
        (out / VAL_MAP).write_text(lines)
    except OSError as e:
        raise DatasetError(f"synthetic ImageNet: cannot write {out}: {e}") from e
    log.info("wrote %d synthetic ImageNet images to %s", count, out)
    return out


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
    if path.is_file() and path.read_bytes() == data:
        return path
    import onnx

    return save_model(onnx.load_from_string(data), path)
