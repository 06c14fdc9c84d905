"""The COCO-2014 captions layout of the stable-diffusion-xl benchmark.

A dataset folder holds ``captions/captions.tsv`` (tab-separated, a header ``id image_id caption height width
file_name coco_url``; row i is qsl_idx i, as the reference's ``coco.py`` and ``accuracy_coco.py`` read it),
``latents/latents.pt`` (the one fixed initial latent every prompt starts from, float32 (1, 4, 128, 128)) and,
for the oracle model and for making FID statistics, the reference images ``images/<file_name>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError

CAPTIONS = "captions/captions.tsv"
LATENTS = "latents/latents.pt"
IMAGES = "images"
COLUMNS = ("id", "image_id", "caption", "height", "width", "file_name", "coco_url")
IMAGE_SHAPE = (1024, 1024, 3)  # what the accuracy script reshapes every response to
LATENT_SHAPE = (1, 4, 128, 128)


def read_captions(path: Path | str) -> list[str]:
    """The caption of every row, read as the reference does (pandas, tab-separated, header row)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"COCO captions: {path} does not exist (make a set with "
                           f"`mlharness dataset synth coco-captions --out DIR`)")
    try:
        frame = pd.read_csv(path, sep="\t")
    except (ValueError, OSError) as e:
        raise DatasetError(f"COCO captions: cannot read {path}: {e}") from e
    if "caption" not in frame.columns:
        raise DatasetError(f"COCO captions: {path} has no 'caption' column (columns: {', '.join(frame.columns)})")
    return [str(c) for c in frame["caption"]]


def read_file_names(path: Path | str) -> list[str]:
    import pandas as pd

    frame = pd.read_csv(path, sep="\t")
    if "file_name" not in frame.columns:
        raise DatasetError(f"COCO captions: {path} has no 'file_name' column")
    return [str(c) for c in frame["file_name"]]


def read_latents(path: Path | str):
    """The fixed latent as a float32 torch tensor of shape (1, 4, 128, 128)."""
    import torch

    path = Path(path)
    try:
        latents = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as e:
        raise DatasetError(f"COCO latents: cannot read {path}: {e}") from e
    if not isinstance(latents, torch.Tensor) or tuple(latents.shape) != LATENT_SHAPE:
        got = tuple(latents.shape) if isinstance(latents, torch.Tensor) else type(latents).__name__
        raise DatasetError(f"COCO latents: {path} holds {got}; expected a tensor of shape {LATENT_SHAPE}")
    return latents.to(torch.float32)


@dataclass
class CaptionSet:
    root: Path
    captions: list[str]
    file_names: list[str]

    def image_path(self, index: int) -> Path:
        return self.root / IMAGES / self.file_names[index]

    def reference_image(self, index: int) -> np.ndarray:
        """The reference image of a sample as (1024, 1024, 3) uint8 (what the oracle answers)."""
        from PIL import Image

        path = self.image_path(index)
        if not path.is_file():
            raise DatasetError(f"COCO captions: reference image {path} of sample {index} is missing")
        with Image.open(path) as img:
            arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
        if arr.shape != IMAGE_SHAPE:
            raise DatasetError(f"COCO captions: {path} is {arr.shape[1]}x{arr.shape[0]}; the benchmark's images "
                               f"are {IMAGE_SHAPE[1]}x{IMAGE_SHAPE[0]} RGB")
        return arr


def caption_set(root: Path | str | None, count: int | None = None) -> CaptionSet:
    if not root:
        raise DatasetError("the coco-captions dataset needs --dataset-path: a folder with captions/captions.tsv "
                           "and latents/latents.pt (or make one: mlharness dataset synth coco-captions --out DIR)")
    root = Path(root)
    captions = read_captions(root / CAPTIONS)
    names = read_file_names(root / CAPTIONS)
    n = min(count, len(captions)) if count else len(captions)
    return CaptionSet(root, captions[:n], names[:n])
