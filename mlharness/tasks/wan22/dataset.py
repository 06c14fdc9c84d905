"""The reference's data (``text_to_video/wan-2.2-t2v-a14b/data/``): ``vbench_prompts.txt``, one prompt a line,
read as ``load_prompts`` reads it (stripped, blank lines skipped: sample i is the i-th prompt), and
``fixed_latent.pt``, one tensor ``torch.save`` wrote, reused for every prompt. The generation settings are
``inference_config.yaml``'s. ``reference_videos/<qsl_idx>.npy`` (mlharness's own, written by ``dataset synth
vbench-prompts``) holds the videos the oracle answers with and the stand-in scorers compare against."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, load_npy, read_text_bounded, torch_load

PROMPTS = "vbench_prompts.txt"
LATENT = "fixed_latent.pt"
REFERENCES = "reference_videos"
# inference_config.yaml of the reference
HEIGHT, WIDTH, FRAMES, FPS, STEPS, SEED = 720, 1280, 81, 16, 20, 42
GUIDANCE, GUIDANCE_2, BOUNDARY_RATIO = 4.0, 3.0, 0.875
NEGATIVE_PROMPT = ("vivid colors, overexposed, static, blurry details, subtitles, style,\nwork of art, painting, "
                   "picture, still, overall grayish, worst quality,\nlow quality, JPEG artifacts, ugly, deformed, "
                   "extra fingers, poorly drawn hands,\npoorly drawn face, deformed, disfigured, deformed limbs, "
                   "fused fingers,\nstatic image, cluttered background, three legs, many people in the "
                   "background,\nwalking backwards")
# the latent of one 81-frame 1280x720 video: 16 channels, (81 - 1) / 4 + 1 frames, each side / 8
LATENT_SHAPE = (1, 16, 21, 90, 160)
# the reference's prompt list is 248 short lines (about 30 KiB); 16 MiB leaves room for far longer lists
PROMPTS_LIMIT = 16 << 20
# the latent above is 19 MiB in float32, a reference video (81 x 720 x 1280 x 3 bytes) 224 MiB: 1 GiB holds both
# with room, and a wrong file (a device, a checkpoint) is refused before it is read
LATENT_LIMIT = VIDEO_LIMIT = DATA_FILE_LIMIT


def dataset_root(path: Any) -> Path:
    if not path:
        raise DatasetError(f"--dataset-path: the folder with {PROMPTS} and {LATENT} (the reference's data/, or "
                           f"mlharness dataset synth vbench-prompts --out DIR)")
    return Path(path)


def read_prompts(path: Path, count: int | None = None) -> list[str]:
    """The prompts of ``path`` as the reference's ``load_prompts`` reads them, the first ``count`` of them."""
    text = read_text_bounded(Path(path), "the prompt list", PROMPTS_LIMIT, error=DatasetError)
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise DatasetError(f"{path}: no prompt (one a line)")
    return prompts[:count] if count else prompts


def read_latent(path: Path) -> np.ndarray:
    """The fixed latent, (1, 16, T, H/8, W/8) float32: a tensor saved with ``torch.save`` (loaded with
    weights_only, so the file runs no code)."""
    import torch

    latent = torch_load(Path(path), "the fixed latent", LATENT_LIMIT, error=DatasetError)
    if not isinstance(latent, torch.Tensor) or latent.ndim != 5 or latent.shape[:2] != (1, 16):
        what = tuple(latent.shape) if isinstance(latent, torch.Tensor) else type(latent).__name__
        raise DatasetError(f"{path}: the fixed latent is a (1, 16, frames, height/8, width/8) tensor; got {what}")
    if not bool(torch.isfinite(latent).all()):
        raise DatasetError(f"{path}: the fixed latent holds NaN or infinity")
    return latent.float().numpy()


def video_size(latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(frames, height, width) a Wan pipeline decodes a latent of ``latent_shape`` to (VAE: 4x in time, 8x in
    space)."""
    return (latent_shape[-3] - 1) * 4 + 1, latent_shape[-2] * 8, latent_shape[-1] * 8


def reference_video(root: Path, index: int) -> np.ndarray:
    path = Path(root) / REFERENCES / f"{index}.npy"
    return load_npy(path, f"the reference video of sample {index}", VIDEO_LIMIT,
                    error=lambda m: DatasetError(f"{m} (mlharness dataset synth vbench-prompts writes them)"))
