"""``manifest validate``'s model-level checks, without running a hook: the framework version constraint is met by
what is installed, and (ONNX models) the model file loads and the declared input/output names, counts, element
types and per-sample shapes agree with the graph. A problem names the manifest and the field."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from mlharness.errors import ManifestError
from mlharness.manifest.loader import LoadedManifest, is_bare_version
from mlharness.predictors.checks import (
    ORT_TYPES,
    ModelTensor,
    check_inputs,
    check_names_and_counts,
    check_outputs,
)


def installed_version(framework: str) -> tuple[str, str | None]:
    from mlharness.predictors import FRAMEWORK_PACKAGES

    candidates = FRAMEWORK_PACKAGES.get(framework, framework)
    candidates = (candidates,) if isinstance(candidates, str) else candidates
    for package in candidates:
        try:
            return package, importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return candidates[0], None


def check_version(loaded: LoadedManifest) -> str:
    """A note on the framework version; raises when the constraint cannot be met by the installed package."""
    from packaging.specifiers import SpecifierSet

    fw = loaded.model.framework
    package, version = installed_version(fw.name)
    spec = fw.version.strip()
    if version is None:
        raise ManifestError(loaded.path, "framework.name", f"framework '{fw.name}' needs the Python package "
                                                           f"'{package}', which is not installed")
    if spec in ("", "*", "latest"):
        return f"{package} {version} installed"
    if is_bare_version(spec):
        return f"{package} {version} installed (made with {spec}; informational)"
    if version not in SpecifierSet(spec, prereleases=True):
        raise ManifestError(loaded.path, "framework.version", f"'{spec}' is not met by the installed {package} "
                                                              f"{version}")
    return f"{package} {version} installed, meets '{spec}'"


def check_onnx(loaded: LoadedManifest, model_file: Path) -> str:
    """Load the ONNX model on the CPU and compare the manifest's declarations with the graph."""
    import onnxruntime as ort

    manifest = str(loaded.path)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(model_file), sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own Fail/InvalidGraph/InvalidProtobuf types
        raise ManifestError(manifest, "model.graph_path", f"onnxruntime cannot load {model_file}: "
                                                          f"{str(e).splitlines()[0][:300]}") from None
    ins = [ModelTensor(t.name, ORT_TYPES.get(t.type), list(t.shape or []) or None) for t in session.get_inputs()]
    outs = [ModelTensor(t.name, ORT_TYPES.get(t.type), list(t.shape or []) or None) for t in session.get_outputs()]
    m = loaded.model
    in_specs = [i.model_dump() for i in m.inputs]
    out_specs = [o.model_dump() for o in m.outputs]
    check_names_and_counts("inputs", in_specs, ins, str(model_file), manifest, exact=True)
    by_name = {t.name: t for t in ins}
    ordered = [by_name[s["name"]] if s.get("name") else ins[k] for k, s in enumerate(in_specs)]
    check_inputs(in_specs, ordered, str(model_file), manifest)
    if not loaded.fetch_all_outputs:  # historical outputs describe the response, not the graph's tensors
        check_names_and_counts("outputs", out_specs, outs, str(model_file), manifest, exact=False)
        check_outputs(out_specs, outs, str(model_file), manifest)
    return (f"model {model_file} loads; {len(ins)} input(s) and {len(outs)} output(s) agree with the "
            "declarations")


def check_loads(loaded: LoadedManifest, model_file: Path) -> str:
    """PyTorch (TorchScript, torch.export) and TensorFlow model files: loaded by the run's own predictor on the
    CPU, which compares the declared inputs with the model's; no hook runs and no input is fed."""
    from mlharness.errors import PredictorError
    from mlharness.predictors import PREDICTORS
    from mlharness.predictors.base import PredictorConfig

    m = loaded.model
    config = PredictorConfig(
        model_path=str(model_file), input_names=[i.name for i in m.inputs],
        output_names=[] if loaded.fetch_all_outputs else [o.name for o in m.outputs], device="cpu", threads=1,
        options=dict(m.framework.options), input_specs=[i.model_dump() for i in m.inputs],
        output_specs=[o.model_dump() for o in m.outputs], model_name=m.name, manifest_path=str(loaded.path))
    predictor = PREDICTORS.get(m.framework.name)(config)
    try:
        predictor.load()
    except PredictorError as e:
        raise ManifestError(loaded.path, "model.graph_path", f"{m.framework.name} cannot use {model_file}: {e}"
                            ) from None
    except ManifestError:
        raise
    except Exception as e:  # noqa: BLE001 - a framework's own loader error: the file does not load
        raise ManifestError(loaded.path, "model.graph_path", f"{m.framework.name} cannot load {model_file}: "
                                                             f"{type(e).__name__}: {str(e)[:300]}") from None
    finally:
        predictor.close()
    return f"model {model_file} loads in {m.framework.name}; its inputs agree with the declarations"


def check_transformers(loaded: LoadedManifest, model_file: Path | None) -> str:
    """What the transformers predictor refuses at ``run``, refused here too: a declared input it would not consume,
    and a checkpoint whose config AutoModelForCausalLM does not take (read with AutoConfig: no weights load)."""
    from mlharness.predictors.transformers_checks import causal_lm_class, check_inputs, image_text_class

    manifest = str(loaded.path)
    chat = check_inputs([i.model_dump() for i in loaded.model.inputs], manifest)
    what = "one input, a session of turns rendered by the chat template" if any(
        i.type == "session" for i in loaded.model.inputs) else "one input, the prompt's token ids"
    if model_file is None:
        return f"{what}; the checkpoint is checked when the run has it"
    if chat:
        return (f"checkpoint {model_file} resolves to {image_text_class(model_file, manifest)} (its config only, no "
                "weights read); one input, the prompt's chat messages")
    return (f"checkpoint {model_file} resolves to {causal_lm_class(model_file, manifest)} (its config only, no "
            f"weights read); {what}")


def loaded_outputs(predictor: object) -> list[ModelTensor] | None:
    """What a loaded predictor's model says about its outputs (names, element types, batch-first shapes), or None
    where the framework does not say before running (PyTorch, remote agents)."""
    own = getattr(predictor, "output_tensors", None)
    if callable(own):
        return own()
    session = getattr(predictor, "session", None)  # ONNX Runtime
    if session is not None and callable(getattr(session, "get_outputs", None)):
        return [ModelTensor(t.name, ORT_TYPES.get(t.type), list(t.shape or []) or None)
                for t in session.get_outputs()]
    return None


def check_declared_outputs(loaded: LoadedManifest, predictor: object) -> None:
    """``run``'s check of the declared outputs (the one ``manifest validate`` makes), on the predictor the run
    loaded, before LoadGen starts: a wrong ``outputs[i].shape`` or ``element_type`` is refused naming the field
    instead of being scored (or silently truncated) later."""
    if loaded.fetch_all_outputs:  # historical outputs describe the response, not the graph's tensors
        return
    tensors = loaded_outputs(predictor)
    if not tensors:
        return
    config = getattr(predictor, "config", None)
    model_path = str(getattr(config, "model_path", None) or loaded.model.name)
    specs = [o.model_dump() for o in loaded.model.outputs]
    check_names_and_counts("outputs", specs, tensors, model_path, str(loaded.path), exact=False)
    check_outputs(specs, tensors, model_path, str(loaded.path))


def check_first_outputs(loaded: LoadedManifest, predictor: object, outputs: object) -> None:
    """The declared outputs against what the model returned for one sample, for frameworks that do not say before
    running (TorchScript, ``nn.Module`` factories, remote agents): the check ``check_declared_outputs`` makes,
    once, before LoadGen starts. Floating outputs the predictor widened to float32 (float16, bfloat16) match
    their declaration."""
    if loaded.fetch_all_outputs or not isinstance(outputs, list | tuple):
        return
    specs = [o.model_dump() for o in loaded.model.outputs]
    config = getattr(predictor, "config", None)
    model_path = str(getattr(config, "model_path", None) or loaded.model.name)
    if len(outputs) < len(specs):
        raise ManifestError(loaded.path, "outputs", f"declares {len(specs)} outputs but the model ({model_path}) "
                                                    f"returned {len(outputs)}")
    tensors = []
    for k, out in enumerate(outputs[: len(specs)]):
        dtype = getattr(out, "dtype", None)
        et = None if dtype is None else str(dtype)
        if et == "float32" and specs[k].get("element_type") in ("float16", "bfloat16"):
            et = specs[k]["element_type"]
        shape = getattr(out, "shape", None)
        tensors.append(ModelTensor(specs[k].get("name") or f"output {k}", et,
                                   None if shape is None or len(shape) == 0 else list(shape)))
    check_outputs([{**s, "name": None} for s in specs], tensors, model_path, str(loaded.path))
