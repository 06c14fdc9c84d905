"""The video kind's row: a tensor's SUT and calibration, with the frames' shape and rate checked before a sample is
played and handed to the metric, which reads the log one video at a time (tasks/wan22/videolog.py), so a run's
memory does not grow with its videos."""

from __future__ import annotations

from typing import Any

from mlharness.errors import ManifestError
from mlharness.kinds.base import Kind, Parts
from mlharness.kinds.tensor import kind as tensor_kind


def video_options(model: Any, path: Any = None) -> dict[str, Any]:
    """What a video model's metric is told: the frame rate and one video's [frames, height, width, 3], as the
    manifest declares them (``response.fps``, ``outputs[0].shape``); each checked here, before the model loads
    and before anything is scored."""
    shape, response = model.outputs[0].shape, model.response
    if shape is None or len(shape) != 4 or shape[-1] != 3 or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ManifestError(path, "outputs[0].shape", f"a video response is one sample's frames, [frames, height, "
                            f"width, 3] with every size fixed; got {shape}")
    if response.fps is None or response.element_type not in ("uint8", "float32"):
        raise ManifestError(path, "response", f"a video response declares its 'fps' and element_type uint8 (pixels) "
                            f"or float32 (values in [0, 1]); got fps {response.fps}, {response.element_type}")
    return {"fps": float(response.fps), "video_shape": list(shape), "video_dtype": response.element_type}


def make_sut(p: Parts) -> Any:
    video_options(p.run.loaded.model, p.run.loaded.path)  # refused before a sample is played
    return tensor_kind.make_sut(p)


KIND = Kind("video", make_sut=make_sut, server_bound=tensor_kind.bound, calibrate=tensor_kind.calibration,
            check_outputs=True, accuracy_options=video_options)
