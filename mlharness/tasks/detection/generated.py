"""Generated detection models: the input size (and a ``tiny`` width) read from the graph file's name, so a
manifest picks a variant by its ``graph_path`` (``yolo_random_640.onnx``, ``retinanet_random_tiny_128.onnx``),
and an ONNX writer that keeps an identical or matching file instead of rebuilding it."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlharness.errors import ManifestError
from mlharness.tasks.files import atomic_write_bytes, mark_generated, reuse_generated

log = logging.getLogger(__name__)


def variant(path: Path | str, default_size: int) -> tuple[int, bool]:
    """(input size, tiny) named by ``path``: the trailing ``_<size>`` of the stem (``default_size`` without
    one); ``tiny`` when the stem has ``_tiny``. Sizes must be multiples of 32 (the detectors' largest stride)."""
    stem = Path(path).stem
    m = re.search(r"_(\d+)$", stem)
    size = int(m.group(1)) if m else default_size
    if size < 32 or size % 32:
        raise ManifestError(Path(path), "model.graph_path",
                            f"the input size {size} in the graph file name must be a multiple of 32, >= 32")
    return size, "_tiny" in stem


def ensure_onnx(path: Path | str, doc: str, build: Callable[[], Any]) -> Path:
    """Write ``build()`` (an onnx.ModelProto, or serialized bytes) at ``path`` unless a model whose doc string
    is ``doc`` is already there."""
    path = Path(path)
    if reuse_generated(path, doc):
        return path
    import onnx

    if path.is_file():
        try:
            if onnx.load(str(path), load_external_data=False).doc_string == doc:
                return mark_generated(path, doc)
        except Exception as e:  # noqa: BLE001 - any load failure means: build it again
            log.warning("rebuilding %s: %s", path, e)
    log.info("generating %s", path)
    model = build()
    if isinstance(model, bytes | bytearray):
        model = onnx.load_from_string(bytes(model))
    model.doc_string = doc
    return mark_generated(atomic_write_bytes(path, model.SerializeToString()), doc)


def torch_to_onnx(module: Any, size: int, input_name: str, output_names: list[str]) -> bytes:
    """``module`` exported with the TorchScript exporter (opset 13, batch 1, like the reference exports)."""
    import io
    import warnings

    import torch

    buf = io.BytesIO()
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, torch.zeros(1, 3, size, size), buf, dynamo=False, opset_version=13,
                          input_names=[input_name], output_names=output_names, do_constant_folding=True)
    return buf.getvalue()
