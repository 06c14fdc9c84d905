"""Synthetic KiTS19: CT-like NIfTI cases in the official layout (the models that segment them are in :mod:`.models`).

Cases are written in the KiTS19 layout (``case_XXXXX/imaging.nii.gz`` int16 HU, ``segmentation.nii.gz`` uint8)
with anisotropic spacings, odd sizes and KiTS-like affines.  Each holds a body (40 HU) in air, two kidneys
(170 HU) placed asymmetrically and a tumor (285 HU) inside one of them, with noise.  The edges after resampling
cycle through every branch of the reference's pre-processing: shorter than the window (edge-padded), a few voxels
above a multiple of 64 (cropped), and well above one (constant-padded to the next multiple).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError

log = logging.getLogger(__name__)

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
