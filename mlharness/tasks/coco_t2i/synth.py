"""A synthetic COCO-2014 captions set in the benchmark's layout (see ``dataset.py``).

Captions are made of varied words (some with HTML entities, quotes and accents, which the CLIP tokenizer cleans),
the latent is one seeded standard-normal (1, 4, 128, 128) float32 tensor as ``tools/latents.pt`` is, and each
caption gets a 1024x1024 reference image (smooth colour fields, so PNGs stay small and images differ). With
``networks``, the FID statistics of the reference images are written too (``val2014.npz``).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from mlharness.tasks.coco_t2i.dataset import CAPTIONS, COLUMNS, IMAGE_SHAPE, IMAGES, LATENT_SHAPE, LATENTS

_SUBJECTS = ("A city", "Two dogs", "A red bus", "A woman", "Some people", "A plate of food", "A café",
             "The large clock", "A giraffe", "A kitchen")
_VERBS = ("at night with", "standing next to", "parked near", "holding", "walking around", "covered in",
          "beside", "under", "displaying", "full of")
_OBJECTS = ("people walking around.", "a wooden fence.", "the \"old\" station.", "an umbrella &amp; a bag.",
            "broccoli and rice.", "tall   trees.", "the time.", "green grass.", "stainless appliances.",
            "naïve tourists.")


def caption(i: int, rng: np.random.Generator) -> str:
    return f"{_SUBJECTS[i % 10]} {_VERBS[rng.integers(10)]} {_OBJECTS[rng.integers(10)]}"


def reference_image(rng: np.random.Generator) -> np.ndarray:
    """A smooth 1024x1024 RGB image: an 8x8 colour grid upsampled bilinearly."""
    from PIL import Image

    small = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
    return np.asarray(small.resize(IMAGE_SHAPE[:2], Image.BILINEAR), dtype=np.uint8)


def write_synthetic_captions(out: Path | str, count: int = 10, seed: int = 0,
                             networks: Path | None = None) -> Path:
    import torch
    from PIL import Image

    out = Path(out)
    rng = np.random.default_rng(seed)
    (out / CAPTIONS).parent.mkdir(parents=True, exist_ok=True)
    (out / IMAGES).mkdir(parents=True, exist_ok=True)
    (out / LATENTS).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        image_id = 100000 + 7 * i
        name = f"COCO_val2014_{image_id:012d}.png"
        rows.append((i, image_id, caption(i, rng), IMAGE_SHAPE[0], IMAGE_SHAPE[1], name,
                     f"http://images.cocodataset.org/val2014/{name}"))
        Image.fromarray(reference_image(rng)).save(out / IMAGES / name)
    with open(out / CAPTIONS, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    generator = torch.Generator().manual_seed(seed)
    torch.save(torch.randn(LATENT_SHAPE, generator=generator, dtype=torch.float32), out / LATENTS)
    if networks is not None:
        write_statistics(out, networks)
    return out


def write_statistics(root: Path, networks: Path, out: Path | None = None) -> Path:
    """``val2014.npz`` (mu, sigma) of the set's reference images under the given networks folder's Inception."""
    from mlharness.fileguard import open_image
    from mlharness.tasks.coco_t2i.dataset import caption_set
    from mlharness.tasks.coco_t2i.metric import STATISTICS, image_statistics
    from mlharness.tasks.coco_t2i.networks import load_inception, network_files

    captions = caption_set(root)
    inception = load_inception(network_files(networks).inception)
    images = (open_image(captions.image_path(i), f"reference image of sample {i}")
              for i in range(len(captions.captions)))
    mu, sigma, _ = image_statistics(images, inception)
    out = out or Path(root) / STATISTICS
    np.savez_compressed(out, mu=mu, sigma=sigma)
    return out
