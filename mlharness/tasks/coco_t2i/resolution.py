"""Image sizes of a text-to-image model: what its manifest declares, and what the accuracy log holds.

Both scoring networks resize whatever they get, as the reference's do: CLIP's transform resizes the shorter side
to 224 (bicubic) and centre-crops, the FID Inception resizes to 299x299 (bilinear). So CLIP and FID are defined
for images of any size, and a generator at 256x256 or 512x512 is scored as it is. What is fixed at 1024x1024x3 is
the MLPerf benchmark: accuracy_coco.py reshapes every response to (1024, 1024, 3), so a stable-diffusion-xl
figure is official only for such images, and a stable-diffusion-xl manifest declaring another size is refused
before the run.
"""

from __future__ import annotations

import math
from typing import Any

from mlharness.errors import ManifestError
from mlharness.tasks.coco_t2i.dataset import IMAGE_SHAPE

BENCHMARK_SHAPE = IMAGE_SHAPE  # (height, width, channels) of the stable-diffusion-xl benchmark
MAX_SIDE = 4096  # pixels: a response of 4096x4096x3 is 48 MiB, 96 MiB of hex in the accuracy log
FIELD = "outputs[0].shape"


def size_text(shape: tuple[int, int, int]) -> str:
    """WxH, as image sizes are said."""
    return f"{shape[1]}x{shape[0]}"


def check_shape(value: Any, what: str, error: Any) -> tuple[int, int, int]:
    """(height, width, 3) from a declared [height, width, 3]; ``error(message)`` makes the exception."""
    ok = (isinstance(value, list | tuple) and len(value) == 3
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value))
    if not ok or value[2] != 3 or not (1 <= value[0] <= MAX_SIDE and 1 <= value[1] <= MAX_SIDE):
        raise error(f"{what} is {value!r}; an image response is declared as [height, width, 3] (HWC, RGB, "
                    f"uint8), each side a whole number from 1 to {MAX_SIDE}")
    return int(value[0]), int(value[1]), 3


def declared_image_shape(ctx: dict[str, Any], benchmark: str | None = None) -> tuple[int, int, int]:
    """The image size the model's manifest declares for its first output, checked before anything runs. With
    ``benchmark`` (the MLPerf stable-diffusion-xl manifests), only the benchmark's 1024x1024x3 is accepted."""
    outputs = ctx.get("outputs") or []
    manifest = f"model manifest '{ctx.get('name')}'"

    def error(message: str) -> ManifestError:
        return ManifestError(manifest, FIELD, message)

    if not outputs or outputs[0].get("shape") is None:
        raise error("a text-to-image model declares the shape of its image, [height, width, 3] (e.g. "
                    "[512, 512, 3]): the accuracy log holds raw pixels, and their size is read from here")
    layout = outputs[0].get("layout")
    if layout not in (None, "HWC"):
        raise ManifestError(manifest, "outputs[0].layout", f"is {layout!r}; image responses are HWC (row-major "
                                                           f"RGB pixels, as the accuracy script reads them)")
    shape = check_shape(list(outputs[0]["shape"]), "the declared shape", error)
    if benchmark and shape != BENCHMARK_SHAPE:
        raise error(f"declares {list(shape)} ({size_text(shape)}); the MLPerf {benchmark} benchmark scores "
                    f"{size_text(BENCHMARK_SHAPE)} images only (its accuracy script reshapes every response to "
                    f"{list(BENCHMARK_SHAPE)}). A generator at another size is scored as a model of its own: drop "
                    f"the manifest's 'mlperf' section (its CLIP and FID are then recorded as not official)")
    return shape


def log_image_shape(first_bytes: int | None, where: str, error: Any) -> tuple[int, int, int]:
    """The size of a log's images when ``accuracy.options.image_shape`` does not say: the benchmark's when the
    first response has its size, else the square RGB image its byte count makes (a non-square image needs the
    option)."""
    if first_bytes is None or first_bytes == math.prod(BENCHMARK_SHAPE):
        return BENCHMARK_SHAPE
    side = math.isqrt(first_bytes // 3) if first_bytes > 0 and first_bytes % 3 == 0 else 0
    if side and side * side * 3 == first_bytes and side <= MAX_SIDE:
        return side, side, 3
    raise error(f"{where}: {first_bytes} bytes is no square RGB image; set accuracy.options.image_shape to "
                f"the model's [height, width, 3]")
