"""Sliding-window inference for volumetric segmentation, as the MLPerf 3D U-Net (KiTS19) reference does it.

The reference (``base_SUT.py`` + ``inference_utils.py``) slides a 128^3 window with 50% overlap over the
pre-processed volume, starting at 0 and stepping by the stride while the window still fits (pre-processing makes
every edge a multiple of the stride, so the windows tile the volume exactly), multiplies every patch's logits by a
Gaussian importance map, sums them and the map into two float32 buffers, divides and takes the argmax over the
channels.  Here the same arithmetic runs in the same window order (so the float32 sums are bit-identical), with
three differences that only bound memory and time:

* patches go through the model ``batch`` at a time (one preallocated input buffer, refilled in place);
* the importance map is accumulated into one single-channel buffer instead of one per class (the reference's
  ``norm_map`` holds three identical channels);
* logits are weighted in the model's own output buffer and the argmax runs slab by slab, so no temporary as
  large as the whole volume (or per-patch copies of it) is ever made.

Peak memory is therefore ``volume * (4 bytes * (classes + 1))`` plus a few patch-sized buffers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

ROI_SHAPE: tuple[int, int, int] = (128, 128, 128)
OVERLAP = 0.5
SIGMA_SCALE = 0.125  # the reference's std: 0.125 * roi edge
MODES = ("gaussian", "constant")
_ARGMAX_SLAB = 16  # depth slices per argmax step: bounds its int64 temporary to a thin slab

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]


def strides_for(roi_shape: Sequence[int], overlap: float = OVERLAP) -> tuple[int, ...]:
    """Window step per axis: ``int(roi * (1 - overlap))``, as the reference computes it."""
    if not 0.0 < overlap < 1.0:
        raise ValueError(f"sliding-window overlap must be in (0, 1), got {overlap}")
    strides = tuple(int(r * (1.0 - overlap)) for r in roi_shape)
    if any(s < 1 for s in strides):
        raise ValueError(f"overlap {overlap} leaves a zero stride for window {tuple(roi_shape)}")
    return strides


def window_starts(size: int, roi: int, stride: int) -> list[int]:
    """Start offsets along one axis: ``(size - roi) // stride + 1`` windows at 0, stride, 2*stride, ..."""
    if size < roi:
        return []
    return list(range(0, stride * ((size - roi) // stride + 1), stride))


def window_positions(shape: Sequence[int], roi_shape: Sequence[int] = ROI_SHAPE,
                     overlap: float = OVERLAP) -> list[tuple[int, int, int]]:
    """Window corners in the reference's order (last axis fastest).

    Raises ValueError unless the windows cover every voxel: pre-processing guarantees that for KiTS19, and a
    voxel no window reaches would otherwise come out of the division as NaN and be labelled background silently.
    """
    if len(shape) != 3 or len(roi_shape) != 3:
        raise ValueError(f"expected 3-D shapes, got volume {tuple(shape)} and window {tuple(roi_shape)}")
    strides = strides_for(roi_shape, overlap)
    axes = []
    for size, roi, stride in zip(shape, roi_shape, strides, strict=True):
        starts = window_starts(size, roi, stride)
        if not starts or starts[-1] + roi != size:
            raise ValueError(
                f"a {tuple(roi_shape)} window with stride {stride} does not tile a volume of shape {tuple(shape)}: "
                f"every edge must be at least the window and a whole number of strides beyond it (pre-process "
                f"the volume first)"
            )
        axes.append(starts)
    return [(i, j, k) for i in axes[0] for j in axes[1] for k in axes[2]]


@functools.lru_cache(maxsize=8)
def _importance_map(roi_shape: tuple[int, int, int], sigma_scale: float) -> np.ndarray:
    from scipy.signal import windows

    # Same float64 steps as the reference's gaussian_kernel(): 1-D Gaussians, outer products, cube root, / max.
    g = [windows.gaussian(n, sigma_scale * n) for n in roi_shape]
    g3 = np.outer(np.outer(g[0], g[1]), g[2]).reshape(roi_shape)
    g3 = np.cbrt(g3)
    g3 /= g3.max()
    out = g3.astype(np.float32)
    out.setflags(write=False)
    return out


def gaussian_importance_map(roi_shape: Sequence[int] = ROI_SHAPE, sigma_scale: float = SIGMA_SCALE) -> np.ndarray:
    """float32 importance map: cube root of the outer product of 1-D Gaussians (std ``sigma_scale * edge``),
    normalised to a maximum of 1.  Read-only and cached: one map serves every call."""
    return _importance_map(tuple(int(n) for n in roi_shape), float(sigma_scale))


def importance_map(mode: str, roi_shape: Sequence[int] = ROI_SHAPE) -> np.ndarray:
    """``gaussian`` (the reference) or ``constant`` (every voxel of a patch weighs 1: a plain average)."""
    if mode == "gaussian":
        return gaussian_importance_map(roi_shape)
    if mode == "constant":
        out = np.ones(tuple(roi_shape), dtype=np.float32)
        out.setflags(write=False)
        return out
    raise ValueError(f"unknown window weighting '{mode}'; expected one of {', '.join(MODES)}")


def segment_volume(run: Runner, volume: np.ndarray, *, roi_shape: Sequence[int] = ROI_SHAPE,
                   overlap: float = OVERLAP, batch: int = 1, mode: str = "gaussian",
                   classes: int | None = None) -> np.ndarray:
    """uint8 label volume (D, H, W) for one (C, D, H, W) float32 volume.

    ``run`` takes ``[patches (n, C, *roi)]`` and returns a list whose first array is the logits
    ``(n, classes, *roi)`` (a predictor's ``predict``).  Up to ``batch`` patches go through it at a time.
    """
    if volume.ndim != 4:
        raise ValueError(f"expected one (channels, depth, height, width) volume, got shape {volume.shape}")
    if batch < 1:
        raise ValueError(f"patch batch must be >= 1, got {batch}")
    roi = tuple(int(r) for r in roi_shape)
    positions = window_positions(volume.shape[1:], roi, overlap)
    weights = importance_map(mode, roi)
    volume = np.asarray(volume, dtype=np.float32)

    patches = np.empty((min(batch, len(positions)), volume.shape[0], *roi), dtype=np.float32)
    result: np.ndarray | None = None
    norm = np.zeros(volume.shape[1:], dtype=np.float32)
    for first in range(0, len(positions), batch):
        group = positions[first:first + batch]
        for n, (i, j, k) in enumerate(group):
            patches[n] = volume[:, i:i + roi[0], j:j + roi[1], k:k + roi[2]]
        logits = run([patches[:len(group)]])[0]
        if logits.ndim != 5 or logits.shape[0] != len(group) or tuple(logits.shape[2:]) != roi:
            raise ValueError(f"the model returned logits of shape {logits.shape} for {len(group)} patch(es) of "
                             f"{roi}; expected ({len(group)}, classes, {', '.join(map(str, roi))})")
        if result is None:
            if classes is not None and logits.shape[1] != classes:
                raise ValueError(f"the model returned {logits.shape[1]} channels, expected {classes}")
            result = np.zeros((logits.shape[1], *volume.shape[1:]), dtype=np.float32)
        in_place = logits.dtype == np.float32 and logits.flags.writeable
        for n, (i, j, k) in enumerate(group):
            window = (slice(i, i + roi[0]), slice(j, j + roi[1]), slice(k, k + roi[2]))
            if in_place:  # weight the logits where the model left them: no patch-sized temporary
                weighted = np.multiply(logits[n], weights, out=logits[n])
            else:
                weighted = np.multiply(logits[n], weights, dtype=np.float32)
            result[(slice(None), *window)] += weighted
            norm[window] += weights
        del logits, weighted  # ``weighted`` is a view: it would keep this batch's logits alive during the next
    assert result is not None  # window_positions() never returns an empty list
    return _finalize(result, norm)


def _finalize(result: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """result / norm, then argmax over the classes as uint8, in depth slabs (in place, bounded temporaries)."""
    np.divide(result, norm[np.newaxis], out=result)
    labels = np.empty(result.shape[1:], dtype=np.uint8)
    for z in range(0, result.shape[1], _ARGMAX_SLAB):
        labels[z:z + _ARGMAX_SLAB] = np.argmax(result[:, z:z + _ARGMAX_SLAB], axis=0)
    return labels


def options_from(attributes: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`segment_volume` from a manifest's ``attributes``.

    Keys: ``roi_shape`` (default [128, 128, 128]), ``overlap`` (0.5), ``patch_batch`` (1: patches per model
    call) and ``window_weighting`` (``gaussian``; ``constant`` averages the patches without weights).
    """
    mode = str(attributes.get("window_weighting", "gaussian"))
    if mode not in MODES:
        raise ValueError(f"attributes.window_weighting '{mode}': expected one of {', '.join(MODES)}")
    return {
        "roi_shape": tuple(int(r) for r in attributes.get("roi_shape", ROI_SHAPE)),
        "overlap": float(attributes.get("overlap", OVERLAP)),
        "batch": int(attributes.get("patch_batch", 1)),
        "mode": mode,
    }


def predict_segmentation(run: Runner, volumes: np.ndarray, **options: Any) -> np.ndarray:
    """The body of a manifest's ``predict`` hook: uint8 labels (N, D, H, W) for a batch (N, C, D, H, W)."""
    if volumes.ndim != 5:
        raise ValueError(f"expected a batch of (channels, depth, height, width) volumes, got shape {volumes.shape}")
    if len(volumes) == 1:  # the usual case (cases differ in shape): no copy of the labels
        return segment_volume(run, volumes[0], **options)[np.newaxis]
    return np.stack([segment_volume(run, v, **options) for v in volumes])
