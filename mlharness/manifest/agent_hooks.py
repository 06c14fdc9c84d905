"""The pre- and post-processing the MLModelScope agents did for a manifest without hooks, from its ``parameters``.

``preprocess(ctx, data)`` gets the input itself (an image path, a ``file://`` or ``http(s)://`` URL), resizes it to
the input's ``dimensions`` in its ``layout``, in its ``color_mode``, and applies ``(x - mean) / scale``.
``postprocess(ctx, outputs)`` returns the per-class probabilities of the output ``probabilities_layer`` (a position
among the graph's outputs), softmax-ed when ``probabilities_transform: softmax``.
"""

import io as _io
import urllib.request as _request

import numpy as _np
from PIL import Image as _Image

from mlharness.fileguard import open_image as _open_image


def _read(data):
    if isinstance(data, bytes):
        return _Image.open(_io.BytesIO(data))
    text = str(data)
    if "://" in text and not text.startswith("file://"):
        with _request.urlopen(text, timeout=60) as r:  # noqa: S310 - the manifest's own input
            return _Image.open(_io.BytesIO(r.read()))
    # through the one door: a FIFO or a device named as the input is an error naming it, not a hang
    return _open_image(text.removeprefix("file://"), "input image")


def preprocess(ctx, data):
    spec = ctx["inputs"][0]
    p = spec.get("parameters") or {}
    layout = (spec.get("layout") or p.get("layout") or "CHW").upper()
    dims = list(spec.get("shape") or p.get("dimensions") or [])
    if len(dims) != 3:
        raise ValueError(f"inputs[0] needs 3 dimensions (parameters.dimensions) to resize an image, got {dims}")
    h, w = (dims[1], dims[2]) if layout == "CHW" else (dims[0], dims[1])
    with _read(data) as im:
        im = im.convert("RGB").resize((int(w), int(h)), _Image.BILINEAR)
        x = _np.asarray(im, dtype=_np.float32)
    if str(p.get("color_mode", "RGB")).upper() == "BGR":
        x = x[..., ::-1]
    mean = _np.asarray(p.get("mean", 0.0), dtype=_np.float32)
    scale = _np.asarray(p.get("scale", 1.0), dtype=_np.float32)
    x = (x - mean) / scale
    if layout == "CHW":
        x = x.transpose(2, 0, 1)
    return _np.ascontiguousarray(x, dtype=_np.dtype(spec.get("element_type") or "float32"))


def postprocess(ctx, outputs):
    p = (ctx["outputs"][0].get("parameters") or {}) if ctx.get("outputs") else {}
    layer = p.get("probabilities_layer", 0)
    # a position among every graph output, or a name: then the output was fetched by that name, first
    y = _np.asarray(outputs[layer if isinstance(layer, int) and not isinstance(layer, bool) else 0],
                    dtype=_np.float32)
    y = y.reshape(y.shape[0], -1)
    if str(p.get("probabilities_transform", "")).lower() == "softmax":
        e = _np.exp(y - y.max(axis=1, keepdims=True))
        y = e / e.sum(axis=1, keepdims=True)
    return y
