"""The manifest's declared inputs checked against what the loaded model says about its own, once, when the
predictor loads: a wrong ``inputs[i].shape`` or ``element_type`` is named before the run starts instead of
failing inside the framework on the first query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlharness.errors import ManifestError

# ONNX Runtime's tensor type strings → the manifest's element types
ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(bfloat16)": "bfloat16", "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16",
    "tensor(int32)": "int32", "tensor(int64)": "int64", "tensor(bool)": "bool", "tensor(string)": "bytes",
}


@dataclass
class ModelTensor:
    """What a framework reports about one model input: its element type (None when unknown) and its full shape,
    batch axis first (None entries, names or -1 for dynamic axes; the whole shape None when unknown)."""

    name: str
    element_type: str | None
    shape: list[Any] | None


def _dynamic(d: Any) -> bool:
    return d is None or not isinstance(d, int) or d < 0


def check_inputs(specs: list[dict[str, Any]], tensors: list[ModelTensor], model_path: str,
                 manifest: str | None) -> None:
    """``specs``: the manifest's inputs (in feed order); ``tensors``: the model's inputs in the same order."""
    for k, (spec, t) in enumerate(zip(specs, tensors, strict=False)):
        where = f"the model's input '{t.name}' ({model_path})"
        declared = spec.get("element_type")
        if t.element_type is not None and declared is not None and declared != t.element_type:
            raise ManifestError(manifest, f"inputs[{k}].element_type",
                                f"declares {declared} but {where} is {t.element_type}")
        shape = spec.get("shape")
        if shape is None or t.shape is None:
            continue
        per_sample = list(t.shape[1:])
        if len(per_sample) != len(shape) or any(
                isinstance(d, int) and d != -1 and not _dynamic(m) and d != m
                for d, m in zip(shape, per_sample, strict=True)):
            shown = ["?" if _dynamic(d) else d for d in t.shape]
            raise ManifestError(manifest, f"inputs[{k}].shape",
                                f"declares {list(shape)} per sample but {where} has shape {shown} (batch axis "
                                f"first, so {['?' if _dynamic(d) else d for d in per_sample]} per sample)")


def tf_tensor(name: str, dtype: Any, shape: Any) -> ModelTensor:
    """A TensorFlow TensorSpec/Tensor's facts; unknown ranks and dtypes without a numpy twin are left open."""
    try:
        et = dtype.as_numpy_dtype.__name__ if dtype.name != "string" else "bytes"
    except (AttributeError, TypeError):
        et = None
    if et is not None and et not in ("float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64",
                                     "bool", "bytes"):
        et = None
    dims = None
    if shape is not None and getattr(shape, "rank", None) is not None:
        dims = [d if d is None else int(d) for d in shape.as_list()]
    return ModelTensor(name, et, dims)


def exported_inputs(program: Any) -> list[ModelTensor]:
    """The user inputs of a torch.export program with their traced shapes (symbolic sizes are dynamic). The
    element type is left open: the PyTorch predictor converts floating inputs to the dtype it runs in."""
    user = list(program.graph_signature.user_inputs)
    found: dict[str, ModelTensor] = {}
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            val = node.meta.get("val")
            shape = None if getattr(val, "shape", None) is None else [
                d if isinstance(d, int) else None for d in val.shape]
            found[node.name] = ModelTensor(node.name, None, shape)
    return [found[n] for n in user if n in found]


def misshapen_output(outputs: Any, n: int, predictor: Any, by_hook: bool) -> Exception | None:
    """After postprocess failed on a batch of ``n``: the error to report instead when the model (or the predict
    hook) gave an output whose first axis is not the batch axis, e.g. one that depends on the data."""
    from mlharness.errors import PredictorError

    if not isinstance(outputs, list | tuple):
        return None
    config = getattr(predictor, "config", None)
    names = list(getattr(config, "output_names", None) or [])
    model = getattr(config, "model_path", None) or getattr(config, "model_name", None) or "the model"
    for k, out in enumerate(outputs):
        shape = getattr(out, "shape", None)
        if shape is None or (len(shape) >= 1 and shape[0] == n):
            continue
        name = names[k] if k < len(names) and names[k] else None
        label = f"output {k}" + (f" ('{name}')" if name else "")
        source = "the predict hook's" if by_hook else f"the model's ({model})"
        rows = f"first axis of {shape[0]}" if len(shape) else "no batch axis (a scalar)"
        return PredictorError(f"{source} {label} has shape {tuple(shape)}, a {rows} for a batch of {n} "
                              "sample(s): every output needs the batch axis first, one row per sample; an output "
                              "whose first axis depends on the data cannot be split into responses")
    return None


def check_names_and_counts(kind: str, specs: list[dict[str, Any]], tensors: list[ModelTensor], model_path: str,
                           manifest: str | None, exact: bool) -> None:
    """Declared ``inputs``/``outputs`` names exist in the model and their number fits (``exact``: the model needs
    every input fed; outputs may be a subset)."""
    names = [t.name for t in tensors]
    if len(specs) > len(tensors) or (exact and len(specs) != len(tensors)):
        raise ManifestError(manifest, kind, f"declares {len(specs)} {kind} but {model_path} has {len(tensors)}: "
                                            f"{names}")
    for k, spec in enumerate(specs):
        if spec.get("name") is not None and spec["name"] not in names:
            raise ManifestError(manifest, f"{kind}[{k}].name", f"'{spec['name']}' is not one of the {kind} of "
                                                               f"{model_path}: {names}")


def check_outputs(specs: list[dict[str, Any]], tensors: list[ModelTensor], model_path: str,
                  manifest: str | None) -> None:
    """The declared outputs' element types against the model's (matched by name, else by position)."""
    by_name = {t.name: t for t in tensors}
    for k, spec in enumerate(specs):
        t = by_name.get(spec.get("name")) if spec.get("name") else (tensors[k] if k < len(tensors) else None)
        declared = spec.get("element_type")
        if t is not None and t.element_type is not None and declared and declared != t.element_type:
            raise ManifestError(manifest, f"outputs[{k}].element_type",
                                f"declares {declared} but the model's output '{t.name}' ({model_path}) is "
                                f"{t.element_type}")
        shape = spec.get("shape")
        if t is not None and shape is not None and t.shape is not None and (
                len(t.shape) - 1 != len(shape) or any(isinstance(d, int) and d != -1 and not _dynamic(m) and d != m
                                                      for d, m in zip(shape, t.shape[1:], strict=True))):
            shown = ["?" if _dynamic(d) else d for d in t.shape]
            raise ManifestError(manifest, f"outputs[{k}].shape",
                                f"declares {list(shape)} per sample but the model's output '{t.name}' ({model_path}) "
                                f"has shape {shown} (batch axis first)")
