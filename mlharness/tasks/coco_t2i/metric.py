"""CLIP score and FID of generated images, as ``text_to_image/tools/accuracy_coco.py`` computes them.

Each log entry's ``data`` is a 1024x1024x3 uint8 image (row-major, RGB, the bytes of the reference's
``postprocess`` array). The first entry of a qsl_idx counts and later ones are skipped, in log order; the CLIP
score is 100 x the cosine similarity of the image and its caption (row qsl_idx of the captions TSV), averaged;
the FID compares the Inception pool-3 statistics of the images with the statistics file (``val2014.npz``: ``mu``,
``sigma``). The printed line is the script's: ``Accuracy Results: {'FID_SCORE': '...', 'CLIP_SCORE': '...'}``.

The log is read entry by entry (ijson) and each image is dropped once scored: only its 2048 Inception features
stay, so memory does not grow with the images (the script's default path holds all of them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult
from mlharness.tasks.coco_t2i.dataset import CAPTIONS, IMAGE_SHAPE, read_captions

log = logging.getLogger(__name__)
STATISTICS = "val2014.npz"
IMAGE_BYTES = int(np.prod(IMAGE_SHAPE))


def log_images(path: Path) -> Iterator[tuple[int, int, np.ndarray]]:
    """(position, qsl_idx, image) of each first entry of a qsl_idx, read one entry at a time."""
    import ijson

    seen: set[int] = set()
    try:
        with open(path, "rb") as f:
            for i, entry in enumerate(ijson.items(f, "item")):
                idx = entry.get("qsl_idx") if isinstance(entry, dict) else None
                if not isinstance(idx, int) or isinstance(idx, bool):
                    raise AccuracyError(f"{path}: entry {i} is malformed: expected an object with an integer "
                                        f"'qsl_idx'")
                if idx in seen:
                    continue
                seen.add(idx)
                yield i, idx, decode_image(entry.get("data"), f"{path}: entry {i} (qsl_idx {idx})")
    except (OSError, ijson.JSONError) as e:
        raise AccuracyError(f"cannot read accuracy log {path}: {e}") from e


def decode_image(data: Any, where: str) -> np.ndarray:
    if not isinstance(data, str):
        raise AccuracyError(f"{where} has no hex 'data' string")
    try:
        raw = bytes.fromhex(data)
    except ValueError as e:
        raise AccuracyError(f"{where}: 'data' is not hex: {e}") from e
    if len(raw) != IMAGE_BYTES:
        raise AccuracyError(f"{where}: {len(raw)} bytes; an image response is {IMAGE_BYTES} bytes (1024x1024x3 "
                            f"uint8, what the accuracy script reshapes to)")
    return np.frombuffer(raw, np.uint8).reshape(IMAGE_SHAPE)


def inception_features(net, image) -> np.ndarray:
    """Pool-3 features of one PIL image, one image per forward pass as the script's default path runs it."""
    import torch

    from mlharness.tasks.coco_t2i.clip_net import to_tensor

    with torch.no_grad():
        return net(to_tensor(image.convert("RGB")).unsqueeze(0))[0].numpy()


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray,
                     eps: float = 1e-6) -> float:
    """||mu1 - mu2||^2 + Tr(S1 + S2 - 2 sqrt(S1 S2)), with the FID tools' fallback for a singular product."""
    from scipy import linalg

    mu1, mu2 = np.atleast_1d(mu1), np.atleast_1d(mu2)
    sigma1, sigma2 = np.atleast_2d(sigma1), np.atleast_2d(sigma2)
    if mu1.shape != mu2.shape or sigma1.shape != sigma2.shape:
        raise AccuracyError(f"FID: statistics of dimension {mu1.shape[0]} cannot be compared with features of "
                            f"dimension {mu2.shape[0]}")
    diff = mu1 - mu2
    covmean, _ = linalg.sqrtm(sigma1.dot(sigma2), disp=False)
    if not np.isfinite(covmean).all():
        log.warning("FID: singular product; adding %s to the diagonal of the covariances", eps)
        offset = np.eye(sigma1.shape[0]) * eps
        covmean = linalg.sqrtm((sigma1 + offset).dot(sigma2 + offset))
    if np.iscomplexobj(covmean):
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=1e-3):
            raise AccuracyError(f"FID: imaginary component {np.max(np.abs(covmean.imag))} in the covariance "
                                f"square root")
        covmean = covmean.real
    return diff.dot(diff) + np.trace(sigma1) + np.trace(sigma2) - 2 * np.trace(covmean)


def read_statistics(path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not path.is_file():
        raise AccuracyError(f"FID statistics {path} not found (the benchmark's is "
                            f"text_to_image/tools/val2014.npz)")
    try:
        with np.load(path) as f:
            return f["mu"][:], f["sigma"][:]
    except (OSError, KeyError, ValueError) as e:
        raise AccuracyError(f"FID statistics {path}: expected an .npz with 'mu' and 'sigma': {e}") from e


def image_statistics(images: Iterator, inception) -> tuple[np.ndarray, np.ndarray, int]:
    """(mean, covariance, count) of the Inception features of PIL images, for a statistics file."""
    feats = np.array([inception_features(inception, img) for img in images], dtype=np.float64)
    return np.mean(feats, axis=0), np.cov(feats, rowvar=False), len(feats)


class CocoT2IMetric(AccuracyMetric):
    """Options: ``captions`` (default captions/captions.tsv), ``statistics`` (default val2014.npz), both relative
    to the dataset path; ``networks``: a folder with stand-in weights (see ``networks.py``) instead of the
    official ones."""

    name = "coco_t2i"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from PIL import Image

        from mlharness.tasks.coco_t2i.clip_net import ClipScorer
        from mlharness.tasks.coco_t2i.networks import load_inception, network_files

        captions_path = self._path(ctx, "captions", CAPTIONS)
        try:
            captions = read_captions(captions_path)
        except DatasetError as e:
            raise AccuracyError(f"coco_t2i: {e}") from e
        mu1, sigma1 = read_statistics(self._path(ctx, "statistics", STATISTICS))
        files = network_files(self._path(ctx, "networks", None) if ctx.options.get("networks") else None)
        clip = ClipScorer(files.clip)
        inception = load_inception(files.inception)

        clip_scores: list[float] = []
        features: list[np.ndarray] = []
        for position, idx, array in log_images(Path(accuracy_log)):
            if not 0 <= idx < len(captions):
                raise AccuracyError(f"coco_t2i: {accuracy_log}: entry {position} has qsl_idx {idx}, outside the "
                                    f"{len(captions)} captions of {captions_path}")
            image = Image.fromarray(array)
            clip_scores.append(100 * clip.similarity(captions[idx], image).item())
            features.append(inception_features(inception, image))
        if not features:
            raise AccuracyError(f"coco_t2i: accuracy log {accuracy_log} has no entries; nothing to score")
        feats = np.asarray(features, dtype=np.float64)
        fid = frechet_distance(mu1, sigma1, np.mean(feats, axis=0), np.cov(feats, rowvar=False))
        clip_mean = np.mean(clip_scores)
        figures = {"FID_SCORE": f"{fid}", "CLIP_SCORE": f"{clip_mean}"}
        return AccuracyResult(text=f"Accuracy Results: {figures}\n", value=float(clip_mean), name="CLIP_SCORE",
                              details={"FID_SCORE": float(fid), "CLIP_SCORE": float(clip_mean),
                                       "images": len(features)})

    @staticmethod
    def _path(ctx: AccuracyContext, key: str, default: str | None) -> Path:
        path = Path(str(ctx.options.get(key, default)))
        if not path.is_absolute() and ctx.dataset_path is not None:
            path = Path(ctx.dataset_path) / path
        return path
