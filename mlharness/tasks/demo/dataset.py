"""The embedded demo: an ImageNet-shaped dataset that an "oracle" ONNX classifier (:mod:`.models`) reads exactly.

Every image is a noisy patch of one of ``DEMO_CLASSES`` colours and the model classifies by the nearest colour of
the image's mean, so with the right pre-processing the expected top-1 accuracy is exactly 100%.  The colour table
is built so that the commonest pre-processing bug (BGR vs RGB) sends every class to a *different* class, which
makes such a bug show up as a near-0% accuracy instead of passing silently.

The dataset mirrors ImageNet's layout (``ILSVRC2012_val_%08d.JPEG`` files plus an official-format
``val_map.txt``) so the real ``imagenet_top1`` metric scores it unchanged.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError

log = logging.getLogger(__name__)

DEMO_CLASSES = 10
DEMO_SIZE = 32
DEMO_NAME_FORMAT = "ILSVRC2012_val_%08d.JPEG"  # 1-based, like ImageNet's validation set
DEMO_JPEG_QUALITY = 90
DEMO_MEAN = 0.5  # per channel, in [0, 1] units
DEMO_NOISE = 20  # per-pixel uniform noise amplitude, in levels
DEMO_SHADE = 12  # rectangles are the class colour shifted by at most this many levels

# Five pairs (k, k+1) where colour k+1 is colour k with R and B swapped, and R != B by >= 50 levels in every
# colour: a BGR/RGB mix-up maps each class exactly onto its partner's colour (0% accuracy instead of 100%).
# Every colour is >= 70 levels (L2) from every other, far more than the image mean can move (noise averages out
# over 1024 pixels, the rectangles shift it by <= DEMO_SHADE) so the correct pipeline scores exactly 100%.
# Channels stay within [30, 230] so +-DEMO_NOISE noise is never clipped on the class colour itself.
DEMO_COLORS: np.ndarray = np.array(
    [
        (230, 30, 30),  # red
        (30, 30, 230),  # blue
        (40, 200, 120),  # spring green
        (120, 200, 40),  # lime
        (230, 200, 40),  # yellow
        (40, 200, 230),  # sky blue
        (200, 60, 150),  # pink
        (150, 60, 200),  # violet
        (130, 110, 30),  # olive
        (30, 110, 130),  # teal
    ],
    dtype=np.uint8,
)
DEMO_COLORS.setflags(write=False)

# Labels cycle through the classes in a fixed shuffled order: balanced, deterministic, not simply index % 10.
DEMO_LABEL_ORDER: tuple[int, ...] = (3, 7, 0, 5, 9, 1, 8, 2, 6, 4)

VAL_MAP = "val_map.txt"


def demo_root() -> Path:
    """Where the demo lives: ``$MLHARNESS_DEMO_DIR``, else ``<cache>/demo`` with the usual mlharness cache dir."""
    env = os.environ.get("MLHARNESS_DEMO_DIR")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("MLHARNESS_CACHE")
    base = Path(cache).expanduser() if cache else Path.home() / ".cache" / "mlharness"
    return base / "demo"


def demo_label(index: int) -> int:
    """Label of the 0-based sample ``index``."""
    return DEMO_LABEL_ORDER[index % DEMO_CLASSES]


def demo_image(index: int, label: int) -> np.ndarray:
    """HWC uint8 RGB image for sample ``index``: the class colour, noise and a few shaded rectangles.

    Seeded by the index alone so every machine generates the same pixels.
    """
    rng = np.random.default_rng(seed=index)
    img = np.empty((DEMO_SIZE, DEMO_SIZE, 3), dtype=np.int16)
    img[:] = DEMO_COLORS[label].astype(np.int16)
    for _ in range(int(rng.integers(2, 5))):
        h, w = (int(v) for v in rng.integers(4, DEMO_SIZE // 2 + 1, size=2))
        y, x = (int(v) for v in rng.integers(0, DEMO_SIZE - np.array([h, w]) + 1))
        img[y : y + h, x : x + w] += int(rng.integers(-DEMO_SHADE, DEMO_SHADE + 1))
    img += rng.integers(-DEMO_NOISE, DEMO_NOISE + 1, size=img.shape, dtype=np.int16)
    return np.clip(img, 0, 255).astype(np.uint8)


def _dataset_complete(root: Path, count: int) -> bool:
    """True when ``root`` already holds a val map of >= count lines whose files all exist."""
    from mlharness.tasks.imagenet.dataset import read_val_map

    val_map = root / VAL_MAP
    if not val_map.is_file():
        return False
    try:
        names, _ = read_val_map(val_map)
    except DatasetError as e:
        log.warning("regenerating the demo dataset: %s", e)
        return False
    return len(names) >= count and all((root / name).is_file() for name in names)


def _write_dataset(dest: Path, count: int) -> None:
    """Write ``count`` JPEGs and the val map into the (empty) folder ``dest``."""
    from PIL import Image

    lines = []
    for index in range(count):
        label = demo_label(index)
        name = DEMO_NAME_FORMAT % (index + 1)
        Image.fromarray(demo_image(index, label), "RGB").save(dest / name, format="JPEG", quality=DEMO_JPEG_QUALITY)
        lines.append(f"{name} {label}\n")
    (dest / VAL_MAP).write_text("".join(lines))


def ensure_demo_dataset(root: Path, count: int = 64) -> Path:
    """Generate the demo dataset into ``root`` unless a complete one (>= count samples) is already there.

    Generation happens in a temporary sibling folder that is renamed into place, so a reader never sees a
    half-written dataset.  If ``root`` already exists (an older, smaller dataset, or other files such as the
    demo model) the files are moved in one by one with ``os.replace`` and ``val_map.txt`` last: the val map,
    which is what declares the dataset complete, only appears once every image it names is in place.
    """
    root = Path(root)
    if count < 1:
        raise DatasetError(f"demo dataset: count must be >= 1, got {count}")
    if _dataset_complete(root, count):
        log.debug("reusing demo dataset at %s", root)
        return root
    if root.exists() and not root.is_dir():
        raise DatasetError(f"demo dataset: {root} exists and is not a folder")
    log.info("generating %d demo images into %s", count, root)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    except OSError as e:
        raise DatasetError(f"demo dataset: cannot create a folder next to {root}: {e}") from e
    try:
        _write_dataset(tmp, count)
        if not root.exists():
            try:
                os.rename(tmp, root)
                return root
            except OSError:
                # Another process created root meanwhile; fall back to moving files in.
                if _dataset_complete(root, count):
                    return root
        root.mkdir(parents=True, exist_ok=True)
        files = sorted(p.name for p in tmp.iterdir() if p.name != VAL_MAP) + [VAL_MAP]
        for name in files:
            os.replace(tmp / name, root / name)
        return root
    except OSError as e:
        raise DatasetError(f"demo dataset: cannot write {root}: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def existing_demo_dataset(root: Path | str) -> Path:
    """``root`` when it holds a demo dataset (``val_map.txt`` and every image it lists); a DatasetError naming
    the path otherwise. A path the user gives is read, never generated into: a mistyped one must not become a
    fresh synthetic dataset that scores 100%."""
    from mlharness.fileguard import check_regular_file
    from mlharness.tasks.imagenet.dataset import read_val_map

    root = Path(root)
    fix = f"write one there with `mlharness dataset synth demo --out {root}`, or leave --dataset-path out"
    if not root.is_dir():
        what = "does not exist" if not root.exists() and not root.is_symlink() else "is not a folder"
        raise DatasetError(f"demo dataset: --dataset-path {root} {what}; {fix}")
    check_regular_file(root / VAL_MAP, "demo dataset: val map",
                       error=lambda m: DatasetError(f"{m}; {root} holds no demo dataset ({fix})"))
    names, _ = read_val_map(root / VAL_MAP)
    missing = [n for n in names if not (root / n).is_file()]
    if not names or missing:
        detail = f"{len(missing)} image(s) it lists are missing, e.g. {missing[0]}" if missing else "it lists none"
        raise DatasetError(f"demo dataset: {root / VAL_MAP}: {detail}; {fix}")
    return root


def demo_dataset_for_run(given: Path | str | None, count: int) -> Path:
    """The demo dataset a run reads: ``given`` (--dataset-path) when it holds one, else the demo's own images in
    the cache (:func:`demo_root`), generated there on first use and said so on stderr."""
    if given:
        return existing_demo_dataset(given)
    root = demo_root() / "images"
    if not _dataset_complete(root, count):
        log.warning("no --dataset-path given: generating %d synthetic demo images into %s (the demo's own "
                    "data; give --dataset-path to read another dataset)", count, root)
    return ensure_demo_dataset(root, count)


def preprocess_demo(path: Path | str, layout: str = "NCHW") -> np.ndarray:
    """The demo's reference pre-processing: RGB, float32 in [0, 1], minus 0.5; CHW (NCHW) or HWC (NHWC)."""
    from PIL import Image

    from mlharness.fileguard import open_image

    if layout not in ("NCHW", "NHWC"):
        raise DatasetError(f"demo pre-processing: unknown layout '{layout}'; expected NCHW or NHWC")
    try:
        # the demo's images are small PNGs; open_image's 256 MiB bound holds any photograph
        with open_image(Path(path), "demo image", error=DatasetError) as im:
            im = im.convert("RGB")
            if im.size != (DEMO_SIZE, DEMO_SIZE):
                im = im.resize((DEMO_SIZE, DEMO_SIZE), Image.BILINEAR)
            arr = np.asarray(im, dtype=np.float32)
    except OSError as e:
        raise DatasetError(f"demo pre-processing: cannot decode image {path}: {e}") from e
    arr = arr / np.float32(255.0) - np.float32(DEMO_MEAN)
    if layout == "NCHW":
        arr = arr.transpose(2, 0, 1)
    return np.ascontiguousarray(arr, dtype=np.float32)
