"""The six VBench dimensions the benchmark scores (``run_evaluation.py``'s default ``--dimensions``), behind one
interface: a scorer takes one video at a time and keeps only its per-video score.

The real scorers are VBench's (``vbench`` 0.1.5 with its networks: DINO ViT-B/16 for subject consistency, CLIP
ViT-B/32 for background consistency, appearance style and scene's captions via Tag2Text, RAFT for the dynamic
degree, AMT-S for motion smoothness). ``vbench`` pins transformers 4.33 and numpy<2, so they run in an environment
of their own (docs/video.md), not in this process. The stand-ins here are deterministic and need nothing: each
dimension compares one statistic of the video with the same statistic of the sample's reference video and
scores ``1 / (1 + distance)``: 1 exactly when they agree, less otherwise. A stand-in score is no VBench score;
every figure computed from one says so.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

DIMENSIONS = ("subject_consistency", "dynamic_degree", "motion_smoothness", "appearance_style", "scene",
              "background_consistency")


def _centre(v: np.ndarray) -> np.ndarray:  # per frame, the mean colour of the middle third: the subject
    f, h, w, _ = v.shape
    return v[:, h // 3:h - h // 3 or h, w // 3:w - w // 3 or w].reshape(f, -1, 3).mean(axis=1)


def _border(v: np.ndarray) -> np.ndarray:  # per frame, the mean colour of the outer rows and columns
    return np.concatenate([v[:, 0], v[:, -1], v[:, :, 0], v[:, :, -1]], axis=1).mean(axis=1)


def _motion(v: np.ndarray) -> np.ndarray:  # per step, the mean absolute change between frames
    return np.abs(np.diff(v, axis=0)).mean(axis=(1, 2, 3)) if len(v) > 1 else np.zeros(1)


def _smoothness(v: np.ndarray) -> np.ndarray:  # per step, the mean absolute second difference
    return np.abs(np.diff(v, n=2, axis=0)).mean(axis=(1, 2, 3)) if len(v) > 2 else np.zeros(1)


def _style(v: np.ndarray) -> np.ndarray:  # the colour histogram of the whole video, 8 bins a channel
    return np.stack([np.histogram(v[..., c], bins=8, range=(0, 1))[0] / v[..., c].size for c in range(3)])


def _scene(v: np.ndarray) -> np.ndarray:  # each frame's 4x4 grey thumbnail
    f, h, w, _ = v.shape
    grey = v.mean(axis=3)[:, :h - h % 4, :w - w % 4]
    return grey.reshape(f, 4, (h - h % 4) // 4, 4, (w - w % 4) // 4).mean(axis=(2, 4))


STATISTICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "subject_consistency": _centre, "dynamic_degree": _motion, "motion_smoothness": _smoothness,
    "appearance_style": _style, "scene": _scene, "background_consistency": _border}


class StandInScorer:
    """One dimension's deterministic stand-in: the distance of a statistic of the video to the reference's."""

    stand_in = True

    def __init__(self, dimension: str) -> None:
        self.dimension, self.statistic = dimension, STATISTICS[dimension]

    def score(self, video: np.ndarray, prompt: str, reference: np.ndarray | None) -> float:
        if reference is None:
            raise ValueError(f"the stand-in of {self.dimension} compares a video with its reference video")
        a, b = video.astype(np.float64) / 255, reference.astype(np.float64) / 255
        if a.shape != b.shape:
            return 0.0
        return float(1.0 / (1.0 + np.abs(self.statistic(a) - self.statistic(b)).mean()))


def stand_in_scorers(dimensions: tuple[str, ...] = DIMENSIONS) -> list[StandInScorer]:
    return [StandInScorer(d) for d in dimensions]
