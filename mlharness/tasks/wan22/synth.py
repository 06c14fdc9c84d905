"""A synthetic VBench prompt set in the reference's layout: ``vbench_prompts.txt``, a ``fixed_latent.pt`` of the
size the tiny pipelines decode (5 frames of 32x32 by default) and a reference video per prompt (moving coloured
shapes, seeded) that the oracle answers with."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.tasks.wan22.dataset import LATENT, PROMPTS, REFERENCES, video_size

SUBJECTS = ("a cat", "a red car", "a person surfing", "a panda drinking coffee", "a boat on a lake",
            "a horse running", "an astronaut", "a dog playing with a ball")
STYLES = ("", ", watercolor painting", ", pixel art", ", in the snow", ", at sunset", ", black and white")


def synthetic_prompts(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"{SUBJECTS[rng.integers(len(SUBJECTS))]}{STYLES[rng.integers(len(STYLES))]} {i}" for i in range(count)]


def synthetic_video(frames: int, height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A square of one colour crossing a background of another: subject, background and motion to score."""
    video = np.empty((frames, height, width, 3), np.uint8)
    video[:] = rng.integers(0, 256, 3, dtype=np.uint8)
    colour, side = rng.integers(0, 256, 3, dtype=np.uint8), max(1, height // 3)
    for f in range(frames):
        top, left = (f * 2) % max(1, height - side), (f * 3) % max(1, width - side)
        video[f, top:top + side, left:left + side] = colour
    return video


def write_synthetic_prompts(out: Path, count: int = 8, seed: int = 0,
                            latent_shape: tuple[int, ...] = (1, 16, 2, 4, 4)) -> Path:
    import torch

    out = Path(out)
    (out / REFERENCES).mkdir(parents=True, exist_ok=True)
    (out / PROMPTS).write_text("".join(p + "\n" for p in synthetic_prompts(count, seed)), encoding="utf-8")
    torch.save(torch.randn(latent_shape, generator=torch.Generator().manual_seed(seed)), out / LATENT)
    rng = np.random.default_rng(seed + 1)
    for i in range(count):
        np.save(out / REFERENCES / f"{i}.npy", synthetic_video(*video_size(latent_shape), rng))
    return out
