"""The image responses of an accuracy log, read one entry at a time with every entry's size bounded.

Each entry's ``data`` is the hex of one uint8 image, 1024x1024x3 for the benchmark (another size for a
generator of its own, see ``resolution.py``). A JSON parser hands over a string only once it
has read all of it, so a log holding one entry of gigabytes would be read whole before its length could be
checked. The parser here reads the file through a reader that counts the bytes read since the parser last gave
an event: more than one image's hex (and the parser's buffers) without an event is an entry larger than an
image, refused naming it before the rest of it is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError
from mlharness.tasks.coco_t2i.dataset import IMAGE_SHAPE

IMAGE_BYTES = int(np.prod(IMAGE_SHAPE))
BUFFER = 1 << 16  # bytes the parser reads at a time


def entry_limit(shape: tuple[int, ...] = IMAGE_SHAPE) -> int:
    """Bytes read without an event for an image of ``shape``: its hex, quotes, key, the parser's buffers."""
    return 2 * int(np.prod(shape)) + 4 * BUFFER


ENTRY_LIMIT = entry_limit()


class EntryTooLarge(Exception):
    """Raised by the reader, inside the parser, when an entry outgrows ENTRY_LIMIT."""


class _CountingReader:
    """A file whose reads count towards a limit that each parser event resets."""

    def __init__(self, f: Any, limit: int) -> None:
        self.f, self.limit, self.since_event = f, limit, 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n if n >= 0 else BUFFER)
        self.since_event += len(data)
        if self.since_event > self.limit:
            raise EntryTooLarge
        return data


def log_entries(path: Path, limit: int = ENTRY_LIMIT, shape: tuple[int, ...] = IMAGE_SHAPE
                ) -> Iterator[tuple[int, int, Any]]:
    """(position, qsl_idx, data) of each entry of the log's top-level array, in log order; ``limit``: the hex
    of one image of ``shape``, named when an entry outgrows it."""
    import ijson

    from mlharness.fileguard import open_regular

    position, entry, key = -1, None, None
    try:
        with open_regular(path, "accuracy log", error=AccuracyError) as f:
            reader = _CountingReader(f, limit)
            for prefix, event, value in ijson.parse(reader, buf_size=BUFFER):
                reader.since_event = 0
                if prefix == "item" and event == "start_map":
                    position, entry = position + 1, {}
                elif prefix == "item" and event == "map_key":
                    key = value
                elif prefix == "item" and event == "end_map":
                    yield position, _index(entry, position, path), entry.get("data")
                    entry = None
                elif prefix == "item" and event != "end_map":  # an entry that is no object
                    raise AccuracyError(f"{path}: entry {position + 1} is malformed: expected an object with an "
                                        f"integer 'qsl_idx'")
                elif entry is not None and prefix == f"item.{key}" and event in ("number", "string", "null",
                                                                                 "boolean"):
                    entry[key] = value
                elif entry is not None and prefix.startswith("item."):
                    entry[key] = ...  # a nested value: no image, no index
                elif prefix == "" and event not in ("start_array", "end_array"):
                    raise AccuracyError(f"{path}: expected a JSON array of entries (LoadGen's accuracy log)")
    except EntryTooLarge:
        idx = entry.get("qsl_idx") if isinstance(entry, dict) else None
        which = f"entry {position}" + (f" (qsl_idx {idx})" if isinstance(idx, int) else "")
        raise AccuracyError(f"{path}: {which} is larger than {limit} bytes, more than the hex of one "
                            f"{'x'.join(map(str, shape))} uint8 image ({2 * int(np.prod(shape))} characters); "
                            f"refused before reading the rest of it (a larger image needs "
                            f"accuracy.options.image_shape)") from None
    except (OSError, ijson.JSONError) as e:
        raise AccuracyError(f"cannot read accuracy log {path}: {e}") from e


def _index(entry: dict, position: int, path: Path) -> int:
    idx = entry.get("qsl_idx")
    if not isinstance(idx, int) or isinstance(idx, bool):
        raise AccuracyError(f"{path}: entry {position} is malformed: expected an object with an integer "
                            f"'qsl_idx'")
    return idx


def log_images(path: Path, image_shape: Any = None) -> Iterator[tuple[int, int, np.ndarray]]:
    """(position, qsl_idx, image) of each first entry of a qsl_idx, read one entry at a time. ``image_shape``
    (``accuracy.options.image_shape``): the images' [height, width, 3]; without it the first image's byte count
    says (the benchmark's 1024x1024, or a square; see ``resolution.log_image_shape``)."""
    from mlharness.tasks.coco_t2i.resolution import check_shape, log_image_shape

    shape = check_shape(list(image_shape) if isinstance(image_shape, list | tuple) else image_shape,
                        "accuracy.options.image_shape", AccuracyError) if image_shape is not None else None
    seen: set[int] = set()
    entries = log_entries(Path(path), entry_limit(shape or IMAGE_SHAPE), shape or IMAGE_SHAPE)
    for position, idx, data in entries:
        if idx in seen:
            continue
        seen.add(idx)
        where = f"{path}: entry {position} (qsl_idx {idx})"
        if shape is None:  # the first image: its size is that of every image
            size = len(data) // 2 if isinstance(data, str) and len(data) % 2 == 0 else None
            shape = log_image_shape(size, where, AccuracyError)
        yield position, idx, decode_image(data, where, shape)


def decode_image(data: Any, where: str, shape: tuple[int, ...] = IMAGE_SHAPE) -> np.ndarray:
    """The image of an entry's hex ``data``; its length is checked before it is decoded."""
    if not isinstance(data, str):
        raise AccuracyError(f"{where} has no hex 'data' string")
    nbytes = int(np.prod(shape))
    if len(data) != 2 * nbytes:
        size = f"{len(data) // 2} bytes" if len(data) % 2 == 0 else f"{len(data)} hex digits (an odd number)"
        what = ("what the accuracy script reshapes to" if tuple(shape) == IMAGE_SHAPE
                else "the size of the log's first image, or accuracy.options.image_shape")
        raise AccuracyError(f"{where}: {size}; an image response is {nbytes} bytes "
                            f"({'x'.join(map(str, shape))} uint8, {what})")
    try:
        raw = bytes.fromhex(data)
    except ValueError as e:
        raise AccuracyError(f"{where}: 'data' is not hex: {e}") from e
    return np.frombuffer(raw, np.uint8).reshape(shape)


def image_responses(images: Any, indices: Any = None) -> np.ndarray:
    """The responses of a batch of images, (N, height, width, 3) uint8, as the manifests' postprocess returns
    them. Float images are checked before the cast, which would turn NaN and infinity into arbitrary bytes
    that are scored as pixels: a sample holding one, or a value outside [0, 255], is refused, naming its
    qsl_idx (``indices``: the batch's sample indices, given to a postprocess with a third parameter)."""
    arr = np.asarray(images)
    if arr.dtype != np.uint8:
        if arr.dtype.kind not in "fiub":
            raise ValueError(f"the images are {arr.dtype}; expected numbers (uint8 pixels)")
        for k in range(arr.shape[0] if arr.ndim else 0):
            sample = f"qsl_idx {int(indices[k])}" if indices is not None else f"response {k} of the batch"
            bad = arr[k].size - np.count_nonzero(np.isfinite(arr[k])) if arr.dtype.kind == "f" else 0
            if bad:
                raise ValueError(f"the image of {sample} holds {bad} non-finite values (NaN or infinity); "
                                 f"the model's output is bad, not an image")
            if arr[k].size and (arr[k].min() < 0 or arr[k].max() > 255):
                raise ValueError(f"the image of {sample} has values from {arr[k].min()} to {arr[k].max()}; "
                                 f"uint8 pixels lie in [0, 255]")
    return np.ascontiguousarray(arr, dtype=np.uint8)
