"""Video responses: what a manifest's ``postprocess`` returns (:func:`video_responses`) and how the accuracy log's
videos are read back, one entry at a time (:func:`log_videos`).

One entry's ``data`` is the hex of one video, [frames, height, width, 3] row-major RGB, uint8 pixels or float32
values in [0, 1] (the reference's ``run_mlperf.py`` hands LoadGen the pipeline's float frames). The log is parsed
by events (``coco_t2i/imagelog.py``): an entry larger than one video is refused before it is read, and each
video is dropped once scored, so an accuracy run's memory does not grow with its videos.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError
from mlharness.tasks.coco_t2i.imagelog import entry_limit, log_entries


def video_responses(frames: Any, indices: Any = None) -> np.ndarray:
    """The responses of a batch of videos, (N, frames, height, width, 3), as the manifests' postprocess returns
    them: uint8 as they are; float frames (values in [0, 1]) times 255, truncated as ``export_to_video`` writes
    the reference's mp4 files. NaN, infinity or a value outside the range are refused, naming the sample's
    qsl_idx (``indices``), before a cast would turn them into pixels."""
    arr = np.asarray(frames)
    if arr.ndim != 5 or arr.shape[-1] != 3:
        raise ValueError(f"a batch of videos is (N, frames, height, width, 3); got shape {arr.shape}")
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    for k in range(arr.shape[0]):
        sample = f"qsl_idx {int(indices[k])}" if indices is not None else f"response {k} of the batch"
        bad = arr[k].size - int(np.count_nonzero(np.isfinite(arr[k])))
        if bad:
            raise ValueError(f"the video of {sample} holds {bad} non-finite values (NaN or infinity)")
        if arr[k].min() < 0 or arr[k].max() > 1:
            raise ValueError(f"the video of {sample} has values from {arr[k].min()} to {arr[k].max()}; float frames "
                             f"lie in [0, 1]")
    return (arr * 255).astype(np.uint8)


def log_videos(path: Path, shape: Any, dtype: str = "uint8") -> Iterator[tuple[int, int, np.ndarray]]:
    """(position, qsl_idx, uint8 video) of each first entry of a qsl_idx, in log order, one entry in memory at a
    time. ``shape``: one video's [frames, height, width, 3]; ``dtype``: what the log holds (uint8, or float32
    frames in [0, 1], converted as :func:`video_responses` converts them)."""
    shape = tuple(int(d) for d in shape)
    item = np.dtype(dtype).itemsize
    seen: set[int] = set()
    for position, idx, data in log_entries(Path(path), entry_limit((int(np.prod(shape)) * item,)), shape):
        if idx in seen:
            continue
        seen.add(idx)
        yield position, idx, decode_video(data, f"{path}: entry {position} (qsl_idx {idx}), field 'data'", shape,
                                          dtype)


def decode_video(data: Any, where: str, shape: tuple[int, ...], dtype: str = "uint8") -> np.ndarray:
    if not isinstance(data, str):
        raise AccuracyError(f"{where}: no hex string")
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if len(data) != 2 * nbytes:
        raise AccuracyError(f"{where}: {len(data) // 2} bytes; a video response is {nbytes} bytes "
                            f"({'x'.join(map(str, shape))} {dtype}, the frames outputs[0].shape declares)")
    try:
        video = np.frombuffer(bytes.fromhex(data), dtype).reshape(shape)
    except ValueError as e:
        raise AccuracyError(f"{where}: not hex: {e}") from e
    if video.dtype == np.uint8:
        return video
    try:
        return video_responses(video[None])[0]
    except ValueError as e:
        raise AccuracyError(f"{where}: {str(e).replace('the video of response 0 of the batch', 'the video')}") from e
