"""Synthetic detection scenes with a known answer, written in the COCO-format layout the official scripts read.

Each image is a noisy gray background with up to four solid rectangles, one per quadrant (so they never touch),
each in one of eight palette colours. A colour is an object class (``slot``): the oracle models find every
colour's pixels after the reference pre-processing and answer its bounding box, so they reproduce the ground
truth exactly when resizing, letterboxing, channel order, scaling, the box coordinate order, the normalisation
and the label map are all right. The palette is closed under swapping R and B and every colour has R != B, so a
BGR input turns each object into another class; blends of any colour with the background never come within the
oracle's tolerance of another colour. JPEGs are written at quality 95 without chroma subsampling, so colour
edges stay within a pixel of the drawn box.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError

# RGB; pairs (k, k + 4) are each other's R/B swap.
PALETTE = np.array([(20, 20, 128), (20, 128, 235), (20, 235, 128), (128, 20, 235),
                    (128, 20, 20), (235, 128, 20), (128, 235, 20), (235, 20, 128)], dtype=np.float32)
SLOTS = len(PALETTE)
TOLERANCE = 38.0  # largest per-channel difference (0-255) from a palette colour the oracle accepts
BACKGROUND = (100, 160)  # range of the background gray
NOISE = 6


@dataclass(frozen=True)
class Obj:
    slot: int
    x0: int
    y0: int
    x1: int  # exclusive
    y1: int

    def bbox(self) -> list[float]:
        """COCO [x, y, width, height] of the pixels the rectangle covers."""
        return [float(self.x0), float(self.y0), float(self.x1 - self.x0), float(self.y1 - self.y0)]


def image_size(index: int, rng: np.random.Generator, min_side: int, max_side: int) -> tuple[int, int]:
    """(height, width); a few are square, the rest landscape or portrait."""
    h = int(rng.integers(min_side, max_side + 1))
    w = int(rng.integers(min_side, max_side + 1))
    if index % 7 == 2:
        w = h
    return h, w


def objects_of(index: int, rng: np.random.Generator, h: int, w: int) -> list[Obj]:
    """Up to four rectangles, one per quadrant, 55-90% of its quadrant's size; every 11th image is empty."""
    if index % 11 == 4:
        return []
    n = 1 + int(rng.integers(0, 4))
    quadrants = rng.permutation(4)[:n]
    slots = rng.permutation(SLOTS)[:n]
    out = []
    for q, slot in zip(quadrants, slots, strict=True):
        qy0, qx0 = (h // 2) * (q // 2), (w // 2) * (q % 2)
        qh, qw = h // 2, w // 2
        bh, bw = int(qh * rng.uniform(0.55, 0.9)), int(qw * rng.uniform(0.55, 0.9))
        y0 = qy0 + 3 + int(rng.integers(0, max(1, qh - bh - 6)))
        x0 = qx0 + 3 + int(rng.integers(0, max(1, qw - bw - 6)))
        out.append(Obj(int(slot), x0, y0, x0 + bw, y0 + bh))
    return out


def scene(index: int, seed: int, min_side: int, max_side: int) -> tuple[np.ndarray, list[Obj]]:
    """(HxWx3 uint8 RGB, objects) of sample ``index``; deterministic in (seed, index)."""
    rng = np.random.default_rng((seed, index, 7))
    h, w = image_size(index, rng, min_side, max_side)
    objs = objects_of(index, rng, h, w)
    img = np.empty((h, w, 3), np.float32)
    img[:] = float(rng.integers(BACKGROUND[0], BACKGROUND[1] + 1))
    for o in objs:
        img[o.y0:o.y1, o.x0:o.x1] = PALETTE[o.slot]
    img += rng.integers(-NOISE, NOISE + 1, size=(h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8), objs


def write_jpeg(path: Path, rgb: np.ndarray) -> None:
    from PIL import Image

    Image.fromarray(rgb, "RGB").save(path, format="JPEG", quality=95, subsampling=0)


@dataclass(frozen=True)
class Layout:
    """Where a dataset keeps its images and annotations, and how it names and numbers them."""

    image_dir: str  # relative to the dataset root
    annotations: str  # relative to the dataset root
    file_name: Callable[[int], str]  # 0-based sample index -> file name
    image_id: Callable[[int], int]  # 0-based sample index -> COCO image id
    categories: Sequence[dict[str, Any]]
    slot_category: Sequence[int]  # palette slot -> category id written in the annotations
    info: dict[str, Any]


def write_dataset(out: Path | str, layout: Layout, count: int, seed: int = 0, min_side: int = 160,
                  max_side: int = 320, workers: int | None = None) -> Path:
    """``count`` JPEGs under ``out/<image_dir>`` and the COCO-format annotations file (written last: it
    declares the set complete)."""
    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic detection set: count must be >= 1, got {count}")
    if not 32 <= min_side <= max_side:
        raise DatasetError(f"synthetic detection set: need 32 <= min side ({min_side}) <= max side ({max_side})")
    images_dir = out / layout.image_dir
    ann = out / layout.annotations
    try:
        images_dir.mkdir(parents=True, exist_ok=True)
        ann.parent.mkdir(parents=True, exist_ok=True)
        ann.unlink(missing_ok=True)

        def one(i: int) -> tuple[dict[str, Any], list[Obj]]:
            rgb, objs = scene(i, seed, min_side, max_side)
            name = layout.file_name(i)
            write_jpeg(images_dir / name, rgb)
            return {"id": layout.image_id(i), "file_name": name, "height": int(rgb.shape[0]),
                    "width": int(rgb.shape[1]), "license": None, "coco_url": None}, objs

        with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:  # PIL's encoder releases the GIL
            results = list(pool.map(one, range(count)))
        annotations = []
        for image, objs in results:
            for o in objs:
                x, y, bw, bh = o.bbox()
                annotations.append({
                    "id": len(annotations) + 1, "image_id": image["id"],
                    "category_id": int(layout.slot_category[o.slot]), "bbox": [x, y, bw, bh], "area": bw * bh,
                    "iscrowd": 0, "segmentation": [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]],
                })
        doc = {"info": layout.info, "licenses": [], "categories": list(layout.categories),
               "images": [image for image, _ in results], "annotations": annotations}
        tmp = ann.with_name(ann.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, ann)
    except OSError as e:
        raise DatasetError(f"synthetic detection set: cannot write {out}: {e}") from e
    return out
