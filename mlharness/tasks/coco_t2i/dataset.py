"""The COCO-2014 captions layout of the stable-diffusion-xl benchmark.

A dataset folder holds ``captions/captions.tsv`` (tab-separated, a header ``id image_id caption height width
file_name coco_url``; row i is qsl_idx i, as the reference's ``coco.py`` and ``accuracy_coco.py`` read it),
``latents/latents.pt`` (the one fixed initial latent every prompt starts from, float32 (1, 4, 128, 128)) and,
for the oracle model and for making FID statistics, the reference images ``images/<file_name>``.
"""

from __future__ import annotations

import io
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
CAPTIONS_LIMIT = 64 << 20  # bytes: the benchmark's 5,000 captions are under 1 MiB
LATENTS_LIMIT = 16 << 20  # bytes: the latent is 256 KiB


def _dataset_error(message: str) -> DatasetError:
    return DatasetError(f"COCO captions: {message}")


def read_caption_table(path: Path | str):
    """The captions TSV as the reference reads it (pandas, tab-separated, header row), from a regular file of
    bounded size: a FIFO, a device or a folder is named as what it is."""
    import pandas as pd

    from mlharness.fileguard import read_bytes_bounded

    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise DatasetError(f"COCO captions: {path} does not exist (make a set with "
                           f"`mlharness dataset synth coco-captions --out DIR`)")
    data = read_bytes_bounded(path, "captions file", CAPTIONS_LIMIT, error=_dataset_error)
    try:
        return pd.read_csv(io.BytesIO(data), sep="\t")
    except (ValueError, OSError) as e:  # pandas' parser and decoding errors are ValueErrors
        raise DatasetError(f"COCO captions: cannot read {path}: {e}") from e


def _column(frame, path: Path | str, name: str) -> list[str]:
    if name not in frame.columns:
        raise DatasetError(f"COCO captions: {path} has no {name!r} column (columns: {', '.join(frame.columns)})")
    return [str(c) for c in frame[name]]


def read_captions(path: Path | str) -> list[str]:
    """The caption of every row."""
    return _column(read_caption_table(path), path, "caption")


def read_file_names(path: Path | str) -> list[str]:
    return _column(read_caption_table(path), path, "file_name")


def read_latents(path: Path | str):
    """The fixed latent as a float32 torch tensor of shape (1, 4, 128, 128), every value finite: a NaN in the
    latent turns every image black, and such images would still be scored."""
    import pickle

    import torch

    from mlharness.fileguard import read_bytes_bounded

    path = Path(path)
    data = read_bytes_bounded(path, "COCO latents file", LATENTS_LIMIT, error=DatasetError)
    try:
        latents = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as e:
        raise DatasetError(f"COCO latents: cannot read {path}: {e}") from e
    if not isinstance(latents, torch.Tensor) or tuple(latents.shape) != LATENT_SHAPE:
        got = tuple(latents.shape) if isinstance(latents, torch.Tensor) else type(latents).__name__
        raise DatasetError(f"COCO latents: {path} holds {got}; expected a tensor of shape {LATENT_SHAPE}")
    if not latents.is_floating_point():
        raise DatasetError(f"COCO latents: {path} holds {latents.dtype} values; expected floating point")
    latents = latents.to(torch.float32)
    bad = int((~torch.isfinite(latents)).sum())
    if bad:
        raise DatasetError(f"COCO latents: {path} holds {bad} non-finite values (NaN or infinity) of "
                           f"{latents.numel()}; every image would be generated from them")
    return latents


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

        from mlharness.fileguard import open_image

        path = self.image_path(index)
        if not path.exists() and not path.is_symlink():
            raise DatasetError(f"COCO captions: reference image {path} of sample {index} is missing")
        try:
            # a 1024x1024 PNG is a few MiB; open_image's 256 MiB bound holds any real one
            with open_image(path, f"reference image of sample {index}", error=_dataset_error) as img:
                arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
        except (OSError, ValueError, Image.DecompressionBombError) as e:
            raise DatasetError(f"COCO captions: reference image {path} of sample {index}: {e}") from e
        if arr.shape != IMAGE_SHAPE:
            raise DatasetError(f"COCO captions: {path} is {arr.shape[1]}x{arr.shape[0]}; the benchmark's images "
                               f"are {IMAGE_SHAPE[1]}x{IMAGE_SHAPE[0]} RGB")
        return arr


def caption_set(root: Path | str | None, count: int | None = None) -> CaptionSet:
    if not root:
        raise DatasetError("the coco-captions dataset needs --dataset-path: a folder with captions/captions.tsv "
                           "and latents/latents.pt (or make one: mlharness dataset synth coco-captions --out DIR)")
    root = Path(root)
    frame = read_caption_table(root / CAPTIONS)
    captions = _column(frame, root / CAPTIONS, "caption")
    names = _column(frame, root / CAPTIONS, "file_name")
    n = min(count, len(captions)) if count else len(captions)
    return CaptionSet(root, captions[:n], names[:n])
