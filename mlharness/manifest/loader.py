"""Load and validate manifests: YAML → typed models, with errors that name the file and the field path.

Loading runs no user code: hooks are only compiled later, once, by :mod:`mlharness.manifest.hooks`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mlharness.errors import ManifestError, suggest
from mlharness.fileguard import check_regular_file
from mlharness.manifest import historical, imports, overrides, safeyaml
from mlharness.manifest.problems import format_validation
from mlharness.manifest.schema import DATASET_ALL_HOOK_KEYS, MODEL_HOOK_KEYS, DatasetManifest, ModelManifest
from mlharness.paths import MANIFESTS_DIR

log = logging.getLogger(__name__)


def manifest_dirs() -> list[Path]:
    """Where built-in manifests live: ``$MLHARNESS_MANIFEST_PATH`` (os.pathsep separated) first, then the
    package's own ``mlharness/manifests/``."""
    dirs = [Path(p) for p in os.environ.get("MLHARNESS_MANIFEST_PATH", "").split(os.pathsep) if p]
    dirs.append(MANIFESTS_DIR)
    return [d for d in dirs if d.is_dir()]


@dataclass
class SourceInfo:
    """Where a manifest came from: its path, text and the YAML line where each hook's source starts."""

    path: Path
    text: str
    hook_lines: dict[str, int] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


@dataclass
class LoadedManifest:
    model: ModelManifest
    source: SourceInfo
    dataset: DatasetManifest | None
    dataset_source: SourceInfo | None  # None when inline or absent
    historical: historical.Historical | None = None  # an MLHarness/MLModelScope manifest, mapped onto spec v1
    notes: list[str] = field(default_factory=list)  # what loading changed, one line each

    @property
    def fetch_all_outputs(self) -> bool:
        """Historical hooks index the graph's outputs by position, whatever the manifest declares (unless it
        names them)."""
        return self.historical is not None and not any(o.name for o in self.model.outputs)

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def directory(self) -> Path:
        return self.source.path.parent

    @property
    def dataset_directory(self) -> Path:
        return (self.dataset_source or self.source).path.parent


def _read_yaml(path: Path) -> tuple[dict[str, Any], SourceInfo]:
    """A manifest file, read within the YAML budget of :mod:`mlharness.manifest.safeyaml`."""
    try:
        raw = safeyaml.read_manifest_bytes(path)
    except OSError as e:
        raise ManifestError(path, None, f"cannot read the file: {e.strerror or e}") from e
    except ValueError as e:
        raise ManifestError(path, None, str(e)) from None
    try:
        text = safeyaml.decode(raw)
    except UnicodeDecodeError as e:
        raise ManifestError(path, None, safeyaml.undecodable(raw, e)) from None
    try:
        data, node = safeyaml.load(text)
    except yaml.YAMLError as e:
        field, problem = safeyaml.describe_error(e)
        raise ManifestError(path, field, problem if field else f"invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ManifestError(path, None, f"expected a mapping at the top level, found {type(data).__name__}")
    source = SourceInfo(path=path, text=text)
    source.hook_lines = _hook_lines(node)
    return data, source


def _hook_lines(node: Any) -> dict[str, int]:
    """1-based file line of the first line of each hook's source, for error messages."""
    lines: dict[str, int] = {}
    if not isinstance(node, yaml.MappingNode):
        return lines

    def walk(mapping: yaml.MappingNode, prefix: str) -> None:
        for key, value in mapping.value:
            name = key.value
            if name in MODEL_HOOK_KEYS + DATASET_ALL_HOOK_KEYS and isinstance(value, yaml.ScalarNode):
                # block scalars ('|') start on the line after the key
                offset = 1 if value.style in ("|", ">") else 0
                lines[prefix + name] = value.start_mark.line + 1 + offset
            elif name == "dataset" and isinstance(value, yaml.MappingNode):
                walk(value, "dataset.")

    walk(node, "")
    return lines


def find_builtin(name: str, kind: str = "model") -> Path | None:
    """A built-in manifest by name: ``<dir>/**/<name>.yaml``; datasets live under a ``datasets/`` folder."""
    for root in manifest_dirs():
        for candidate in sorted(root.rglob(f"{name}.yaml")) + sorted(root.rglob(f"{name}.yml")):
            is_dataset = "datasets" in candidate.relative_to(root).parts
            if is_dataset == (kind == "dataset"):
                return candidate
    return None


def builtin_names(kind: str = "model") -> list[str]:
    names = set()
    for root in manifest_dirs():
        for p in list(root.rglob("*.yaml")) + list(root.rglob("*.yml")):
            if ("datasets" in p.relative_to(root).parts) == (kind == "dataset"):
                names.add(p.stem)
    return sorted(names)


def resolve_manifest_path(
    ref: str | Path,
    kind: str = "model",
    relative_to: Path | None = None,
    owner: Path | None = None,
    field: str | None = None,
) -> Path:
    """A path (absolute, relative to ``relative_to`` or the CWD) or a built-in name. ``owner``/``field``: the
    manifest and field that named ``ref``, reported when it cannot be found."""
    ref_path = Path(ref).expanduser()
    candidates = [ref_path] if ref_path.is_absolute() else []
    if not ref_path.is_absolute():
        if relative_to is not None:
            candidates.append(relative_to / ref_path)
        candidates.append(Path.cwd() / ref_path)
    for c in candidates:
        if c.is_file():
            return c.resolve()
    bare = ref_path.suffix not in (".yaml", ".yml") and len(ref_path.parts) == 1  # may name a built-in
    for c in candidates:  # there, but a FIFO, a device, a folder or a broken link: say so, not "does not exist"
        if (c.exists() or c.is_symlink()) and not (bare and (c.is_dir() or not c.exists())):
            if owner is not None:
                check_regular_file(c, f"{kind} manifest file", error=lambda m: ManifestError(owner, field, m))
            check_regular_file(c, f"the {kind} manifest", error=lambda m, c=c: ManifestError(c, None, m),
                               name_path=False)
    if bare:
        found = find_builtin(str(ref), kind)
        if found:
            return found.resolve()
        raise ManifestError(
            owner, field, f"no {kind} manifest file or built-in named '{ref}'.{suggest(str(ref), builtin_names(kind))}"
        )
    if owner is not None:
        raise ManifestError(owner, field, f"{kind} manifest file {ref_path} does not exist")
    raise ManifestError(ref_path, None, f"{kind} manifest file does not exist")


def load_dataset_manifest(
    ref: str | Path, relative_to: Path | None = None, owner: Path | None = None
) -> tuple[DatasetManifest, SourceInfo]:
    path = resolve_manifest_path(ref, "dataset", relative_to, owner=owner, field="dataset" if owner else None)
    data, source = _read_yaml(path)
    imports.make_importable(path.parent)
    if "references" in data and "init" in data:  # MLHarness dataset manifests list their papers; informational
        data = {k: v for k, v in data.items() if k != "references"}
    try:
        return DatasetManifest.model_validate(data), source
    except ValidationError as e:
        raise format_validation(path, DatasetManifest, e) from None


def split_reference(ref: str | Path) -> tuple[str | Path, str | None]:
    """``NAME_OR_PATH@FRAMEWORK`` → (manifest reference, framework or None)."""
    text = str(ref)
    if "@" in text and not Path(text).exists():
        name, _, fw = text.rpartition("@")
        return name, fw.lower()
    return ref, None


def select_framework(path: Path, model: ModelManifest, framework: str | None) -> ModelManifest:
    """The manifest with the ``frameworks`` variant for ``framework`` applied (itself when it is the default)."""
    if framework is None or framework == model.framework.name:
        return model
    if framework not in model.frameworks:
        known = [model.framework.name, *model.frameworks]
        raise ManifestError(path, "frameworks", f"no '{framework}' variant of this model.{suggest(framework, known)}")
    v = model.frameworks[framework]
    update: dict[str, Any] = {"framework": v.framework, "attributes": {**model.attributes, **v.attributes}}
    if v.model is not None:
        update["model"] = v.model
    if v.inputs is not None:
        update["inputs"] = v.inputs
    if v.outputs is not None:
        update["outputs"] = v.outputs
    return model.model_copy(update=update)


def load_manifest(ref: str | Path, dataset: str | Path | None = None, framework: str | None = None) -> LoadedManifest:
    """Load a model manifest and the dataset manifest it names (``dataset`` overrides the manifest's choice).
    ``framework`` (or a ``@framework`` suffix on ``ref``) selects one of the manifest's framework variants."""
    ref, suffix_fw = split_reference(ref)
    framework = framework or suffix_fw
    path = resolve_manifest_path(ref, "model")
    data, source = _read_yaml(path)
    imports.make_importable(path.parent)
    found = historical.recognise(path, data)
    if found is not None:
        data = historical.to_spec_v1(path, data, found)
    try:
        model = ModelManifest.model_validate(data)
    except ValidationError as e:
        raise format_validation(path, ModelManifest, e) from None
    model, override = overrides.apply(path, model)
    for name, variant in model.frameworks.items():
        if variant.framework.name != name:
            raise ManifestError(path, f"frameworks.{name}.framework.name",
                                f"must be '{name}' (the key it is listed under), not '{variant.framework.name}'")
    model = select_framework(path, model, framework)
    _check_framework(path, model)
    _check_metric(path, model)
    ds: DatasetManifest | None = None
    ds_source: SourceInfo | None = None
    if dataset is not None:
        ds, ds_source = load_dataset_manifest(dataset)
    elif isinstance(model.dataset, DatasetManifest):
        ds = model.dataset
    elif isinstance(model.dataset, str):
        ds, ds_source = load_dataset_manifest(model.dataset, relative_to=path.parent, owner=path)
    if model.accuracy is None and ds is not None and ds.accuracy is not None:
        model = model.model_copy(update={"accuracy": ds.accuracy})  # the dataset's labels, for any model
        _check_metric(ds_source.path if ds_source else path, model)
    if found is not None:
        model = historical.with_features(model, path.parent)
    notes = [found.note()] if found else []
    notes += [override] if override else []
    for note in notes:
        log.info("%s: %s", path, note)
    return LoadedManifest(model=model, source=source, dataset=ds, dataset_source=ds_source, historical=found,
                          notes=notes)


def _check_framework(path: Path, model: ModelManifest) -> None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    from mlharness.predictors import NEEDS_MODEL_FILE, PREDICTORS

    name = model.framework.name
    if name not in PREDICTORS:
        raise ManifestError(path, "framework.name", f"unknown framework '{name}'.{suggest(name, PREDICTORS.names())}")
    if model.model is None and name in NEEDS_MODEL_FILE:
        raise ManifestError(path, "model", f"required field is missing: framework '{name}' needs a model file "
                                           "(model.graph_path)")
    if model.model is not None and model.model.graph_path is None and model.model.factory is None:
        raise ManifestError(path, "model.graph_path", "required field is missing (or model.factory for pytorch)")
    if model.model is not None and model.model.factory is not None and name != "pytorch":
        raise ManifestError(path, "model.factory", f"a model factory needs framework 'pytorch', not '{name}'")
    version = model.framework.version.strip()
    if version not in ("", "*", "latest") and not is_bare_version(version):
        try:
            SpecifierSet(version)
        except InvalidSpecifier:
            raise ManifestError(
                path, "framework.version", f"'{version}' is not a version constraint (expected e.g. '>=1.16' or '*')"
            ) from None


def _check_metric(path: Path, model: ModelManifest) -> None:
    """An unknown metric would otherwise only surface after the whole LoadGen run."""
    from mlharness.tasks import METRICS

    if model.accuracy is not None and model.accuracy.metric not in METRICS:
        name = model.accuracy.metric
        known = suggest(name, METRICS.names())
        raise ManifestError(path, "accuracy.metric", f"unknown accuracy metric '{name}'.{known}")
    _check_accuracy_dtype(path, model)
    _check_text_metric(path, model)


def _check_text_metric(path: Path, model: ModelManifest) -> None:
    """A metric that scores text would read a token model's ids as UTF-8 bytes: without a tokenizer to decode
    them the run is refused here, before anything loads (``manifest validate`` refuses it too)."""
    from mlharness.tasks.generic.text import ID_TYPES, TEXT_METRICS

    acc = model.accuracy
    if acc is None or acc.metric not in TEXT_METRICS or acc.options.get("tokenizer") or model.response.text:
        return  # response.text: the generated text is written as UTF-8 bytes, scored as it is
    written = model.response.element_type
    if model.response.kind != "tokens" and written not in ID_TYPES:
        return
    why = "response.kind: tokens" if model.response.kind == "tokens" else f"response.element_type: {written}"
    graph = model.model.graph_path if model.model is not None and model.model.graph_path else None
    example = f" (e.g. tokenizer: {graph}, the model's checkpoint folder)" if graph and "://" not in graph else ""
    raise ManifestError(path, "accuracy.options.tokenizer", f"missing: accuracy metric '{acc.metric}' scores text, "
                        f"but the responses are token ids ({why}); read as UTF-8 bytes they would be scored as "
                        f"garbage. Name the folder of the tokenizer that decodes them{example}")


def _check_accuracy_dtype(path: Path, model: ModelManifest) -> None:
    """The metric decodes responses with ``accuracy.options.dtype``: another dtype than the one they are written
    in (``response.element_type``) would score garbage, silently."""
    if model.accuracy is None or "dtype" not in model.accuracy.options:
        return
    declared = model.accuracy.options["dtype"]
    written = model.response.element_type
    if str(declared) == written:
        return
    try:
        import numpy as np

        from mlharness.manifest.schema import numpy_dtype

        if np.dtype(str(declared)) == numpy_dtype(written):
            return
    except (TypeError, ValueError):
        pass
    raise ManifestError(path, "accuracy.options.dtype",
                        f"is {declared!r} but 'response.element_type' is '{written}': the metric would decode the "
                        f"responses in another dtype than they are written in; make the two the same")


def is_bare_version(text: str) -> bool:
    """MLModelScope manifests write the version a model was made with ('1.7.1'), not a constraint."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        return False
    return True
