"""A labelled folder of solid-colour images, for the generic metrics and the ``files`` dataset: class ``k`` of
:data:`CLASSES` is drawn in colour ``PALETTE[k]``, so a model that pools the image and finds the nearest colour
(:mod:`mlharness.tasks.generic.models`) names every class exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# ImageNet class ids spread over the 1000 classes, and one distinct colour each
CLASSES = (7, 42, 101, 250, 399, 512, 777, 998)
PALETTE = ((230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200),
           (245, 130, 48), (145, 30, 180), (70, 240, 240), (128, 128, 128))


def write_colour_folder(out: Path | str, count: int, seed: int = 0, val_map: str = "labels.txt") -> Path:
    """``img_XXXX.png`` images of varied sizes and ``<val_map>`` with ``<file> <class id>`` lines."""
    from PIL import Image

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        k = int(rng.integers(len(CLASSES)))
        h, w = int(rng.integers(24, 64)), int(rng.integers(24, 64))
        name = f"img_{i:04d}.png"
        Image.new("RGB", (w, h), PALETTE[k]).save(out / name)
        lines.append(f"{name} {CLASSES[k]}")
    (out / val_map).write_text("\n".join(lines) + "\n")
    return out
