"""Synthetic ImageNet in the official layout, drawn so that an oracle model (:mod:`.models`) reads its labels.

Each image carries its label as a 4x4 grid of coloured cells covering exactly the region the reference center
crop keeps (the central ``224/256`` of the short side), drawn over a noisy background in a random size and
aspect ratio (odd, portrait, landscape, smaller than 256 so it is up-scaled, multiples of 256 for OpenCV's
integer-ratio INTER_AREA path). Some images are grayscale JPEGs and some CMYK JPEGs, which OpenCV decodes to
3-channel BGR like the reference.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError

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
