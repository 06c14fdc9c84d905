"""Reference-exact ImageNet pre-processing for the MLPerf vision models, with an optional on-disk cache.

Two pipelines, each reproducing the MLPerf inference reference (vision/classification_and_detection/python/
dataset.py) with the same image libraries, so the tensors are bit-identical to the reference's:

- ``preprocess_onnx_tf`` (ResNet50 TF/ONNX, ``pre_process_vgg``): decode with OpenCV (BGR, always 3 channels,
  grayscale and CMYK JPEGs included), convert to RGB, resize so the short side is ``int(100 * 224 / 87.5)`` = 256
  with the long side truncated to an int, INTER_AREA, center-crop 224 at ``int((W - 224) / 2)``, float32, subtract
  the per-channel mean (no scaling), CHW for ONNX or HWC for TF.
- ``preprocess_torchvision`` (``pre_process_imagenet_pytorch``): OpenCV decode, RGB, then torchvision's PIL path:
  ``resize(256)`` (short side 256, long side ``int(256 * long / short)``, PIL bilinear), ``center_crop(224)`` (offsets
  ``int(round((W - 224) / 2))``, Python's round), ``to_tensor`` (/255 in float32) and ``normalize`` with the ImageNet
  mean/std. torchvision itself is not needed: the two transforms are a few lines over PIL, reproduced here.

Decoding and resizing dominate a sample's cost; OpenCV and PIL release the GIL, so the harness's load workers
scale across cores. ``PreprocessCache`` stores results keyed by every parameter plus the source file's identity.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import check_regular_file, load_npy
from mlharness.tasks.files import atomic_write

log = logging.getLogger(__name__)

IMAGENET_MEAN_RGB = (123.68, 116.78, 103.94)  # pre_process_vgg, in 0..255 units
TORCHVISION_MEAN = (0.485, 0.456, 0.406)
TORCHVISION_STD = (0.229, 0.224, 0.225)
INTERPOLATIONS = ("area", "linear", "cubic", "nearest")
LAYOUTS = {"NCHW": "NCHW", "CHW": "NCHW", "NHWC": "NHWC", "HWC": "NHWC"}
CACHE_FORMAT = 1  # bump when the meaning of cached arrays changes

Source = str | os.PathLike | np.ndarray


def _layout(layout: str | None) -> str:
    if layout is None:
        return "NCHW"
    if layout.upper() not in LAYOUTS:
        raise DatasetError(f"image pre-processing: unknown layout '{layout}'; expected one of {', '.join(LAYOUTS)}")
    return LAYOUTS[layout.upper()]


def read_bgr(source: Source) -> np.ndarray:
    """HxWx3 uint8 BGR, decoded as the reference does (``cv2.imread``, colour); an array is passed through."""
    if isinstance(source, np.ndarray):
        if source.ndim != 3 or source.shape[2] != 3 or source.dtype != np.uint8:
            raise DatasetError(f"expected an HxWx3 uint8 BGR image, got {source.dtype} {source.shape}")
        return source
    import cv2

    # cv2 takes only a path: checked first, so a FIFO or device is named, never waited on or read for ever
    check_regular_file(Path(os.fspath(source)), "image", error=DatasetError)
    img = cv2.imread(os.fspath(source))  # IMREAD_COLOR: grayscale and CMYK come back as 3-channel BGR
    if img is None:
        raise DatasetError(f"cannot decode image {os.fspath(source)} (missing, unreadable or not an image)")
    return img


def resize_with_aspectratio(img: np.ndarray, out_height: int, out_width: int, scale: float = 87.5,
                            interpolation: str = "area") -> np.ndarray:
    """Short side -> ``int(100 * out / scale)``, the other side scaled with int truncation (reference formula)."""
    import cv2

    flags = {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR, "cubic": cv2.INTER_CUBIC,
             "nearest": cv2.INTER_NEAREST}
    if interpolation not in flags:
        raise DatasetError(f"unknown interpolation '{interpolation}'; expected one of {', '.join(INTERPOLATIONS)}")
    height, width = img.shape[:2]
    new_height = int(100.0 * out_height / scale)
    new_width = int(100.0 * out_width / scale)
    if height > width:
        w, h = new_width, int(new_height * height / width)
    else:
        h, w = new_height, int(new_width * width / height)
    return cv2.resize(img, (w, h), interpolation=flags[interpolation])


def center_crop(img: np.ndarray, out_height: int, out_width: int) -> np.ndarray:
    """The reference's crop: offsets ``int((size - out) / 2)``, truncated."""
    height, width = img.shape[:2]
    left, right = int((width - out_width) / 2), int((width + out_width) / 2)
    top, bottom = int((height - out_height) / 2), int((height + out_height) / 2)
    return img[top:bottom, left:right]


def _normalise(img: np.ndarray, mean: Sequence[float] | None, std: Sequence[float] | None,
               layout: str) -> np.ndarray:
    out = np.asarray(img, dtype=np.float32)
    if mean is not None:
        out = out - np.asarray(mean, dtype=np.float32)
    if std is not None:
        out = out / np.asarray(std, dtype=np.float32)
    if layout == "NCHW":
        out = out.transpose(2, 0, 1)
    return np.ascontiguousarray(out, dtype=np.float32)


def preprocess_onnx_tf(source: Source, layout: str = "NCHW", *, size: int = 224, scale: float = 87.5,
                       mean: Sequence[float] | None = IMAGENET_MEAN_RGB, std: Sequence[float] | None = None,
                       channel_order: str = "RGB", interpolation: str = "area",
                       cache: PreprocessCache | None = None) -> np.ndarray:
    """ResNet50 TF/ONNX reference pre-processing of one image: float32 [3, size, size] (NCHW) or [size, size, 3].

    ``channel_order="BGR"`` skips the BGR->RGB conversion (models trained on BGR input); ``mean=None`` skips the
    subtraction; ``std`` divides after it (the reference's ResNet50 uses none).
    """
    layout = _layout(layout)
    channel_order = channel_order.upper()
    if channel_order not in ("RGB", "BGR"):
        raise DatasetError(f"channel_order '{channel_order}': expected RGB or BGR")
    params = {"pipeline": "onnx_tf", "layout": layout, "size": size, "scale": scale, "mean": _floats(mean),
              "std": _floats(std), "channel_order": channel_order, "interpolation": interpolation}

    def compute() -> np.ndarray:
        import cv2

        img = read_bgr(source)
        if channel_order == "RGB":
            img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        img = resize_with_aspectratio(img, size, size, scale=scale, interpolation=interpolation)
        return _normalise(center_crop(img, size, size), mean, std, layout)

    return cache.get(source, params, compute) if cache is not None else compute()


def torchvision_resize(img: Any, size: int) -> Any:  # PIL.Image -> PIL.Image
    """``torchvision.transforms.functional.resize(img, size)`` on a PIL image: short side ``size``, bilinear."""
    from PIL import Image

    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    if (new_w, new_h) == (w, h):
        return img
    return img.resize((new_w, new_h), Image.BILINEAR)


def torchvision_center_crop(img: Any, size: int) -> Any:  # PIL.Image -> PIL.Image
    """``torchvision.transforms.functional.center_crop(img, size)`` for an image at least ``size`` on each side."""
    w, h = img.size
    if w < size or h < size:
        raise DatasetError(f"center crop {size} of a {w}x{h} image: torchvision would pad; not supported")
    top = int(round((h - size) / 2.0))
    left = int(round((w - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def preprocess_torchvision(source: Source, layout: str = "NCHW", *, resize: int = 256, crop: int = 224,
                           mean: Sequence[float] | None = TORCHVISION_MEAN,
                           std: Sequence[float] | None = TORCHVISION_STD,
                           cache: PreprocessCache | None = None) -> np.ndarray:
    """The reference's ``pre_process_imagenet_pytorch``: float32 [3, crop, crop] (NCHW) or [crop, crop, 3]."""
    layout = _layout(layout)
    params = {"pipeline": "torchvision", "layout": layout, "resize": resize, "crop": crop, "mean": _floats(mean),
              "std": _floats(std)}

    def compute() -> np.ndarray:
        import cv2
        from PIL import Image

        img = Image.fromarray(cv2.cvtColor(read_bgr(source), cv2.COLOR_BGR2RGB))
        img = torchvision_center_crop(torchvision_resize(img, resize), crop)
        x = np.asarray(img, dtype=np.uint8).astype(np.float32) / np.float32(255.0)  # to_tensor
        return _normalise(x, mean, std, layout)  # normalize: (x - mean) / std, in float32 like torch

    return cache.get(source, params, compute) if cache is not None else compute()


def preprocess_from_spec(ctx: dict[str, Any], source: Source, cache: PreprocessCache | None = None) -> np.ndarray:
    """Pre-process for the manifest's first input: ``parameters.pipeline`` picks ``onnx_tf`` or ``torchvision``;
    the other parameters are that pipeline's keyword arguments; layout and size come from the tensor spec."""
    spec = ctx["inputs"][0]
    params = dict(spec.get("parameters") or {})
    pipeline = params.pop("pipeline", "onnx_tf")
    layout = _layout(spec.get("layout"))
    shape = spec.get("shape") or []
    size = int(shape[1] if layout == "NCHW" else shape[0]) if len(shape) == 3 else 224
    if pipeline not in PIPELINE_PARAMETERS:
        raise DatasetError(f"inputs[0].parameters.pipeline '{pipeline}': expected onnx_tf or torchvision")
    unknown = sorted(set(params) - PIPELINE_PARAMETERS[pipeline])
    if unknown:
        raise DatasetError(f"inputs[0].parameters {unknown} are not parameters of the '{pipeline}' pipeline "
                           f"(known: {', '.join(sorted(PIPELINE_PARAMETERS[pipeline]))})")
    if pipeline == "onnx_tf":
        return preprocess_onnx_tf(source, layout, size=size, cache=cache, **params)
    return preprocess_torchvision(source, layout, crop=size, cache=cache, **params)


# Keyword arguments a manifest may set in inputs[0].parameters (size/crop and layout come from the tensor spec).
PIPELINE_PARAMETERS = {
    "onnx_tf": frozenset({"scale", "mean", "std", "channel_order", "interpolation"}),
    "torchvision": frozenset({"resize", "mean", "std"}),
}


def _floats(values: Sequence[float] | None) -> list[float] | None:
    return None if values is None else [float(v) for v in values]


_CACHES: dict[Path, PreprocessCache] = {}
_CACHES_LOCK = threading.Lock()


def cache_for(ctx: dict[str, Any]) -> PreprocessCache | None:
    """The cache a manifest asks for with ``attributes.preprocess_cache``: ``true`` for
    ``$MLHARNESS_CACHE/preprocessed``, a path for that folder, false/absent for none. One instance per folder,
    shared by the load workers."""
    setting = (ctx.get("attributes") or {}).get("preprocess_cache")
    if not setting:
        return None
    if setting is True:
        from mlharness.manifest.assets import cache_dir

        root = cache_dir() / "preprocessed"
    else:
        root = Path(str(setting)).expanduser()
    with _CACHES_LOCK:
        return _CACHES.setdefault(root, PreprocessCache(root))


class PreprocessCache:
    """Pre-processed tensors on disk, one ``.npy`` per (parameters, source file, library versions).

    The key hashes every pre-processing parameter, the source's resolved path, size and modification time, and
    the OpenCV and Pillow versions, so changing any of them is a miss: a stale tensor is never reused (the
    reference's cache, keyed by file name only, would silently reuse one). Writes go to a temporary file renamed
    into place, so concurrent load workers and interrupted runs never leave a half-written entry.
    """

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    @staticmethod
    def _libraries() -> dict[str, str]:
        import cv2
        import PIL

        return {"cv2": cv2.__version__, "pillow": PIL.__version__, "format": str(CACHE_FORMAT)}

    def key(self, source: Path | str, params: dict[str, Any]) -> str:
        path = Path(source).resolve()
        try:
            st = path.stat()
        except OSError as e:
            raise DatasetError(f"cannot read image {path}: {e.strerror or e}") from e
        ident = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        blob = json.dumps({"params": params, "source": ident, "libraries": self._libraries()}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def get(self, source: Source, params: dict[str, Any], compute: Callable[[], np.ndarray]) -> np.ndarray:
        if isinstance(source, np.ndarray):  # no file identity to key on
            return compute()
        key = self.key(source, params)
        entry = self.root / key[:2] / f"{key}.npy"
        if os.path.lexists(entry):  # a FIFO or folder there is not an entry mlharness wrote: never replaced
            check_regular_file(entry, "pre-processing cache entry", error=DatasetError)
            try:  # an entry is one pre-processed image: under 1 MiB at 224x224, tens of MiB for the largest inputs
                arr = load_npy(entry, "pre-processing cache entry", 256 << 20, error=DatasetError)
                with self._lock:
                    self.hits += 1
                return arr
            except DatasetError as e:
                log.warning("ignoring unreadable cache entry %s: %s", entry, e)
        arr = compute()
        with self._lock:
            self.misses += 1
        try:
            atomic_write(entry, lambda tmp: np.save(tmp, arr, allow_pickle=False), suffix=".npy")
        except OSError as e:  # a full or read-only disk costs speed, not correctness
            log.warning("cannot write pre-processing cache entry %s: %s", entry, e)
        return arr
