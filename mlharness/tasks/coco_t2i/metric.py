"""CLIP score and FID of generated images, as ``text_to_image/tools/accuracy_coco.py`` computes them.

Each log entry's ``data`` is a 1024x1024x3 uint8 image (row-major, RGB, the bytes of the reference's
``postprocess`` array); a generator of another size is scored too (the networks resize every image, as the
reference's do: ``resolution.py``), its figures recorded as not official and its size in the details. The first entry of a qsl_idx counts and later ones are skipped, in log order; the CLIP
score is 100 x the cosine similarity of the image and its caption (row qsl_idx of the captions TSV), averaged;
the FID compares the Inception pool-3 statistics of the images with the statistics file (``val2014.npz``: ``mu``,
``sigma``). The printed line is the script's: ``Accuracy Results: {'FID_SCORE': '...', 'CLIP_SCORE': '...'}``.

The log is read entry by entry (ijson) and each image is dropped once scored: only its 2048 Inception features
stay, so memory does not grow with the images (the script's default path holds all of them).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult
from mlharness.tasks.coco_t2i.dataset import CAPTIONS, read_captions
from mlharness.tasks.coco_t2i.imagelog import log_images
from mlharness.tasks.coco_t2i.resolution import BENCHMARK_SHAPE, size_text

log = logging.getLogger(__name__)
STATISTICS = "val2014.npz"
STATISTICS_MEMBER_LIMIT = 1 << 30  # bytes of one array once inflated: the benchmark's sigma is 32 MiB


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
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, naming it
        product = sigma1.dot(sigma2)
    # sqrtm of a matrix holding NaN or infinity does not return (minutes, then a meaningless value)
    for name, value in (("the statistics' mean", mu1), ("the statistics' covariance", sigma1),
                        ("the images' mean", mu2), ("the images' covariance", sigma2),
                        ("the product of the covariances", product)):
        if not np.isfinite(value).all():
            raise AccuracyError(f"FID: {name} holds non-finite values (NaN or infinity); no distance can be "
                                f"computed")
    covmean, _ = linalg.sqrtm(product, disp=False)
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
    """``mu`` and ``sigma`` of an .npz statistics file, checked: a regular file, an archive (not a bare .npy),
    arrays of numbers of matching shapes, every value finite."""
    import io

    from mlharness.fileguard import DATA_FILE_LIMIT, read_bytes_bounded

    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise AccuracyError(f"FID statistics {path} not found (the benchmark's is "
                            f"text_to_image/tools/val2014.npz)")
    # val2014.npz: a 2048-vector and a 2048x2048 covariance in float64, 32 MiB; 1 GiB holds it with room
    data = read_bytes_bounded(path, "FID statistics file", DATA_FILE_LIMIT, error=AccuracyError)
    try:
        archive = np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise AccuracyError(f"FID statistics {path}: expected an .npz with 'mu' and 'sigma': {e}") from e
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise AccuracyError(f"FID statistics {path} is a .npy array of shape {archive.shape}, not an .npz "
                            f"archive holding 'mu' and 'sigma' (as numpy.savez writes it)")
    with archive:
        mu, sigma = _member(archive, path, "mu"), _member(archive, path, "sigma")
    if mu.ndim != 1 or sigma.shape != (mu.shape[0], mu.shape[0]):
        raise AccuracyError(f"FID statistics {path}: 'mu' has shape {mu.shape} and 'sigma' {sigma.shape}; "
                            f"expected (d,) and (d, d)")
    return mu, sigma


def _member(archive: Any, path: Path, name: str) -> np.ndarray:
    import zipfile
    import zlib

    if name not in archive.files:
        raise AccuracyError(f"FID statistics {path} has no {name!r} array (it holds: "
                            f"{', '.join(archive.files) or 'nothing'})")
    size = archive.zip.getinfo(f"{name}.npy").file_size  # from the archive's directory, before inflating
    if size > STATISTICS_MEMBER_LIMIT:
        raise AccuracyError(f"FID statistics {path}: {name!r} is {size} bytes once inflated, more than "
                            f"{STATISTICS_MEMBER_LIMIT}; check that it is the right file")
    try:
        value = archive[name]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise AccuracyError(f"FID statistics {path}: cannot read {name!r}: {e}") from e
    if value.dtype.kind not in "fiu":
        raise AccuracyError(f"FID statistics {path}: {name!r} holds {value.dtype} values; expected numbers")
    bad = int(value.size - np.count_nonzero(np.isfinite(value)))
    if bad:
        raise AccuracyError(f"FID statistics {path}: {name!r} holds {bad} non-finite values (NaN or infinity) "
                            f"of {value.size}")
    return value.astype(np.float64, copy=False)


@functools.cache
def official_threads() -> int:
    """The intra-op thread count torch gives a process that has not set one: the official script's. The
    Inception features (float32 convolutions) change in their last bits with the thread count, and the FID
    with them; a run's process has set its own count for the model, so this is asked of a fresh
    interpreter with the same environment and CPU affinity."""
    import torch

    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                             capture_output=True, text=True, timeout=300, check=True).stdout
        return max(1, int(out.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        log.warning("cannot ask a fresh process for torch's default thread count (%s); scoring with %d threads",
                    e, torch.get_num_threads())
        return torch.get_num_threads()


@contextlib.contextmanager
def scoring_threads() -> Iterator[int]:
    """torch at the official script's thread count for the duration, restored afterwards."""
    import torch

    before, threads = torch.get_num_threads(), official_threads()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


def image_statistics(images: Iterator, inception) -> tuple[np.ndarray, np.ndarray, int]:
    """(mean, covariance, count) of the Inception features of PIL images, for a statistics file."""
    with scoring_threads():  # the same statistics whatever the caller's thread count
        feats = np.array([inception_features(inception, img) for img in images], dtype=np.float64)
    return np.mean(feats, axis=0), np.cov(feats, rowvar=False), len(feats)


class CocoT2IMetric(AccuracyMetric):
    """Options: ``captions`` (default captions/captions.tsv), ``statistics`` (default val2014.npz), both relative
    to the dataset path; ``networks``: a folder with stand-in weights (see ``networks.py``) instead of the
    official ones; ``image_shape``: [height, width, 3] of the images (default: the first image's size, the
    benchmark's 1024x1024 or a square)."""

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
        images = log_images(Path(accuracy_log), ctx.options.get("image_shape"))
        first = next(images, None)  # a malformed log is refused before seconds of loading the networks
        if first is None:
            raise AccuracyError(f"coco_t2i: accuracy log {accuracy_log} has no entries; nothing to score")
        files = network_files(self._path(ctx, "networks", None) if ctx.options.get("networks") else None)
        clip = ClipScorer(files.clip)
        inception = load_inception(files.inception)

        clip_scores: list[float] = []
        features: list[np.ndarray] = []
        with scoring_threads():
            for position, idx, array in itertools.chain([first], images):
                if not 0 <= idx < len(captions):
                    raise AccuracyError(f"coco_t2i: {accuracy_log}: entry {position} has qsl_idx {idx}, outside "
                                        f"the {len(captions)} captions of {captions_path}")
                image = Image.fromarray(array)
                clip_scores.append(100 * clip.similarity(captions[idx], image).item())
                features.append(inception_features(inception, image))
                if not (np.isfinite(features[-1]).all() and np.isfinite(clip_scores[-1])):
                    raise AccuracyError(f"coco_t2i: {accuracy_log}: entry {position} (qsl_idx {idx}): the "
                                        f"scoring networks give non-finite values for its image (check the "
                                        f"weights of {files.inception.parent})")
        feats = np.asarray(features, dtype=np.float64)
        fid = frechet_distance(mu1, sigma1, np.mean(feats, axis=0), np.cov(feats, rowvar=False))
        clip_mean = np.mean(clip_scores)
        figures = {"FID_SCORE": f"{fid}", "CLIP_SCORE": f"{clip_mean}"}
        shape = first[2].shape
        benchmark = shape == BENCHMARK_SHAPE
        text = f"Accuracy Results: {figures}\n"
        if not benchmark:  # not the script's line: a checker reading accuracy.txt must not take it for one
            text = (f"{size_text(shape)} images (the benchmark's are {size_text(BENCHMARK_SHAPE)}; CLIP resizes "
                    f"to 224, Inception to 299), not official: {figures}\n")
        return AccuracyResult(text=text, value=float(clip_mean), name="CLIP_SCORE", official=benchmark,
                              details={"FID_SCORE": float(fid), "CLIP_SCORE": float(clip_mean),
                                       "images": len(features), "image_size": size_text(shape)})

    @staticmethod
    def _path(ctx: AccuracyContext, key: str, default: str | None) -> Path:
        path = Path(str(ctx.options.get(key, default)))
        if not path.is_absolute() and ctx.dataset_path is not None:
            path = Path(ctx.dataset_path) / path
        return path
