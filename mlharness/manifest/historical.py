"""Manifests written for MLHarness (``c3sr/dlmodel``) and the MLModelScope agents, read as they are.

Their ``ModelManifest`` differs from spec v1 in a handful of places: ``version`` is often a YAML number, an input's
``parameters.input_layer`` is the graph input's position (``0``) or its name, the output is a single ``output``
mapping (``probabilities_layer``, ``features_url``), and ``references``, ``hidden``, ``framework.container`` and
``model.features_path``/``features_checksum`` have no counterpart. :func:`recognise` tells the two formats apart by
keys only one of them uses, :func:`to_spec_v1` maps a historical document onto spec v1 and returns what it mapped,
in one line. A document that uses keys of both is refused: its meaning would depend on which set wins.

Historical postprocess hooks index the model's outputs by position whatever the manifest declares
(``data[1]`` on a two-output graph with one declared output), so a historical model fetches all its graph outputs.
A manifest without ``preprocess``/``postprocess`` (the agents did that work from the ``parameters``) gets the
built-in hooks of :mod:`mlharness.manifest.agent_hooks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import ManifestError

AGENT_HOOKS = Path(__file__).with_name("agent_hooks.py")

# keys only spec v1 has (top level); a historical manifest carrying one of them is a mix of the two formats
OURS_ONLY = ("manifest_version", "mlperf", "response", "accuracy", "batching", "frameworks", "predict")
# top-level keys only the historical ModelManifest has
THEIRS_ONLY = ("output", "references", "hidden")
MODEL_THEIRS = ("features_path", "features_checksum")  # spec v1 has them too (the class names)


@dataclass
class Historical:
    """What was recognised and mapped: ``markers`` (why the file is historical) and ``mapped`` (what changed)."""

    markers: list[str] = field(default_factory=list)
    mapped: list[str] = field(default_factory=list)

    def note(self) -> str:
        return "historical MLHarness/MLModelScope manifest; mapped: " + ", ".join(self.mapped or ["nothing"])


def _markers(data: dict[str, Any]) -> list[str]:
    found = [k for k in THEIRS_ONLY if k in data]
    if "version" in data and isinstance(data["version"], int | float) and not isinstance(data["version"], bool):
        found.append("version (a number)")
    fw = data.get("framework")
    if isinstance(fw, dict) and "container" in fw:
        found.append("framework.container")
    for i, spec in enumerate(data.get("inputs") or []):
        params = spec.get("parameters") if isinstance(spec, dict) else None
        if isinstance(params, dict) and isinstance(params.get("input_layer"), int):
            found.append(f"inputs[{i}].parameters.input_layer (a position)")
    return found


def _ours(data: dict[str, Any]) -> list[str]:
    found = [k for k in OURS_ONLY if k in data]
    if "output" in data and "outputs" in data:
        found.append("outputs (beside output)")
    return found


def recognise(path: Path, data: dict[str, Any]) -> Historical | None:
    """The historical format's markers in ``data``; None for a spec v1 document. Raises on a mix of both."""
    markers = _markers(data)
    if not markers:
        return None
    ours = _ours(data)
    if ours:
        raise ManifestError(path, ours[0], "this file mixes the two manifest formats: it has keys of the historical "
                            f"MLHarness/MLModelScope format ({', '.join(markers)}) and keys of mlharness's spec v1 "
                            f"({', '.join(ours)}); write it in one format (keep the historical file as it is and "
                            "put the spec v1 keys in a manifest of their own, or drop the historical keys)")
    return Historical(markers=markers)


def to_spec_v1(path: Path, data: dict[str, Any], found: Historical) -> dict[str, Any]:
    """A copy of the historical document ``data`` in spec v1; ``found.mapped`` lists what was changed."""
    out = dict(data)
    mapped = found.mapped
    if isinstance(out.get("version"), int | float) and not isinstance(out.get("version"), bool):
        out["version"] = str(out["version"])
        mapped.append(f"version {out['version']} (a number) as a string")
    for key in ("references", "hidden"):
        if key in out:
            out.pop(key)
            mapped.append(f"{key} (informational, dropped)")
    if "container" in out:
        mapped.append("container (informational)")
    fw = out.get("framework")
    if isinstance(fw, dict) and "container" in fw:
        out["framework"] = {k: v for k, v in fw.items() if k != "container"}
        mapped.append("framework.container (dropped)")
    if isinstance(out.get("framework"), dict) and isinstance(out["framework"].get("version"), int | float):
        out["framework"] = {**out["framework"], "version": str(out["framework"]["version"])}
    model = out.get("model")
    if isinstance(model, dict) and any(k in model for k in MODEL_THEIRS):
        mapped.append("model.features_path/features_checksum (the class names, for the accuracy metric)")
    if isinstance(model, dict) and model.get("is_archive") is True and model.get("base_url") and "model_file" not in model:
        out["model"] = _archive(model)
        mapped.append("model.base_url as the archive, graph_path as the model inside it (the checksums of files "
                      "inside an archive are not verified)")
    if isinstance(out.get("inputs"), list):
        out["inputs"] = [_input(path, i, spec, mapped) for i, spec in enumerate(out["inputs"])]
    if "output" in out:
        single = out.pop("output")
        out["outputs"] = [_output(single, mapped, "output")]
        mapped.append("output as outputs[0]")
    elif isinstance(out.get("outputs"), list):
        out["outputs"] = [_output(s, mapped, f"outputs[{i}]") for i, s in enumerate(out["outputs"])]
    for key in ("preprocess", "postprocess"):
        if not out.get(key):
            out[key] = {"file": str(AGENT_HOOKS), "function": key}
            mapped.append(f"{key} (none given: the agents' built-in one, from the parameters)")
    if not any(isinstance(o, dict) and (o.get("name") or (o.get("parameters") or {}).get("output_layer"))
               for o in out.get("outputs") or []):
        mapped.append("every graph output passed to postprocess")
    return out


def _archive(model: dict[str, Any]) -> dict[str, Any]:
    """MLModelScope: with ``is_archive``, ``base_url`` is the archive and ``graph_path``/``weights_path`` name files
    inside it; the checksums are of those files, so they are checked by nothing here but the archive's members'
    paths (an archive member outside its folder is refused when it is unpacked)."""
    out = {k: v for k, v in model.items() if k not in ("base_url", "graph_checksum", "weights_path",
                                                         "weights_checksum")}
    out["graph_path"] = model["base_url"]
    out["model_file"] = model.get("graph_path")
    return out


def _input(path: Path, i: int, spec: Any, mapped: list[str]) -> Any:
    if not isinstance(spec, dict) or not isinstance(spec.get("parameters"), dict):
        return spec
    params = dict(spec["parameters"])
    layer = params.get("input_layer")
    if isinstance(layer, int) and not isinstance(layer, bool):
        if layer != i:
            raise ManifestError(path, f"inputs[{i}].parameters.input_layer",
                                f"is {layer} (a position) at position {i}: list the inputs in the graph's order")
        params.pop("input_layer")
        mapped.append(f"inputs[{i}].parameters.input_layer {layer} as the graph's input {layer}")
    out = {**spec, "parameters": params}
    dims, layout = params.get("dimensions"), str(params.get("layout") or spec.get("layout") or "").upper()
    if layout == "HWC" and isinstance(dims, list) and len(dims) == 3 and "shape" not in spec:
        # MLModelScope's dimensions are channels first whatever the layout; the sample is height, width, channels
        out["shape"] = [dims[1], dims[2], dims[0]]
        mapped.append(f"inputs[{i}].parameters.dimensions {dims} (channels first) as the HWC shape {out['shape']}")
    return out


def _output(spec: Any, mapped: list[str], where: str) -> Any:
    if not isinstance(spec, dict) or not isinstance(spec.get("parameters"), dict):
        return spec
    params = dict(spec["parameters"])
    layer = params.get("output_layer")
    if isinstance(layer, int) and not isinstance(layer, bool):  # a position, not a graph name
        params.setdefault("probabilities_layer", params.pop("output_layer"))
    layer = params.get("probabilities_layer")
    if isinstance(layer, int) and not isinstance(layer, bool):
        mapped.append(f"{where}.parameters.probabilities_layer {layer} as the graph's output {layer}")
    out = {**spec, "parameters": params}
    if isinstance(layer, str) and "name" not in spec and not isinstance(params.get("output_layer"), str):
        out["name"] = layer  # the graph's output of that name (a frozen graph has no list of outputs to take)
        mapped.append(f"{where}.parameters.probabilities_layer '{layer}' as the output's name")
    return out


def features_file(model: Any, manifest_dir: Path) -> str | None:
    """MLModelScope's class-name file (``model.features_path`` or the output's ``features_url``): a URL, or a
    local path resolved against the manifest's folder."""
    asset = getattr(model, "model", None)
    found = asset.features_path if asset is not None and asset.features_path else None
    for out in getattr(model, "outputs", []) or []:
        found = found or out.parameters.get("features_url") or out.parameters.get("features_path")
    if not found:
        return None
    return str(found) if "://" in str(found) else str((manifest_dir / str(found)).resolve())


def with_features(model: Any, manifest_dir: Path) -> Any:
    """A classification metric of a historical model reads class names from its features file (labels given as
    names, e.g. ImageNet synset ids, are looked up there)."""
    feats = features_file(model, manifest_dir)
    acc = model.accuracy
    if not feats or acc is None or acc.metric not in ("top1", "top5") or "features" in acc.options:
        return model
    options = {**acc.options, "features": feats}
    checksum = model.model.features_checksum if model.model is not None else None
    for out in model.outputs:
        checksum = checksum or out.parameters.get("features_checksum")
    if checksum and "://" in feats:
        options["features_checksum"] = str(checksum)
    return model.model_copy(update={"accuracy": acc.model_copy(update={"options": options})})


def missing_dataset(loaded: Any) -> str | None:
    """Why a historical manifest cannot run without a dataset manifest (None when it has one, or is spec v1).
    Its hooks (the agents' built-in ones or its own) take each sample's input, an image file for the vision
    agents, which only a dataset manifest hands over: a bare ``--count`` would feed them sample numbers."""
    if getattr(loaded, "historical", None) is None or getattr(loaded, "dataset", None) is not None:
        return None
    return (f"{loaded.path} is a historical MLHarness/MLModelScope manifest, which names no dataset: pass "
            "--dataset files --dataset-path DIR (a folder of input files, one sample each), or --dataset FILE.yml "
            "(a dataset manifest)")
