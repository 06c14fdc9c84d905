"""The checker's sample videos: ``accuracy/videos/<qsl_idx>.mp4`` for the ten prompt ids of the round
(``REQUIRED_ACC_BENCHMARK`` of submission_checker/constants.py, mirrored in submission/rules.py
``ACCURACY_EXTRA_FILES``), written by the metric beside the accuracy log as it reads the videos one at a time.

The reference leaves no code for them (``run_inference.py`` writes every video with diffusers'
``export_to_video``, imageio and ffmpeg); the checker only asks that each file exists. mlharness writes MPEG-4
Part 2 (``mp4v``) with OpenCV, which the ``vision`` extra brings, so that no ffmpeg binary is needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.errors import AccuracyError

FOLDER = "videos"
# the v6.1 checker's sample ids (its v6.0 list differs in five: submission/rules.py has both)
SAMPLE_IDS = (130, 106, 84, 59, 12, 123, 43, 22, 238, 32)


def write_mp4(video: np.ndarray, fps: float, path: Path) -> Path:
    """``video`` (frames, height, width, 3) uint8 RGB as an mp4 file at ``fps``."""
    try:
        import cv2
    except ImportError as e:
        raise AccuracyError(f"writing {path} needs OpenCV: pip install 'mlharness[vision]' ({e})") from e
    frames, height, width, _ = video.shape
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (int(width), int(height)))
    if not writer.isOpened():
        raise AccuracyError(f"OpenCV cannot open {path} for an mp4v video of {width}x{height} at {fps} fps")
    try:
        for frame in video:
            writer.write(np.ascontiguousarray(frame[..., ::-1]))  # OpenCV writes BGR
    finally:
        writer.release()
    if not path.is_file() or path.stat().st_size == 0:
        raise AccuracyError(f"OpenCV wrote no video to {path}")
    return path
