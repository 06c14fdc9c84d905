"""The predictor factory: a manifest's model file (generated, or downloaded and checksum-verified), the framework
version it asks for, and loaded predictor instances (several side by side, optionally pinned to their cores)."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AssetError, ManifestError, MLHarnessError, PredictorError, RunFailed
from mlharness.fileguard import check_regular_file, hash_file
from mlharness.loadgen.pinning import pinned
from mlharness.manifest.assets import cache_dir, parse_checksum, resolve_asset, verify_checksum
from mlharness.manifest.loader import LoadedManifest, is_bare_version
from mlharness.manifest.modelcheck import check_declared_outputs, check_first_outputs, loaded_outputs
from mlharness.manifest.overrides import ENV as MODEL_FILE_ENV
from mlharness.manifest.schema import streams_tokens
from mlharness.manifest.targets import run_generator
from mlharness.predictors import FRAMEWORK_PACKAGES, PREDICTORS
from mlharness.predictors.base import Predictor, PredictorConfig
from mlharness.predictors.generative import generation_config

log = logging.getLogger(__name__)


def resolve_model_file(loaded: LoadedManifest) -> Path | None:
    asset = loaded.model.model
    if asset is None or asset.graph_path is None:
        return None
    if asset.generator:
        target = cache_dir() / "generated" / loaded.model.name / Path(asset.graph_path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        path = run_generator(loaded, target)  # bounded in time, unable to end the process
        try:  # a declared checksum holds for a generated model as for a downloaded one
            verify_checksum(path, asset.graph_checksum)
        except AssetError as e:
            raise ManifestError(loaded.path, "model.graph_checksum", f"the model written by {asset.generator}: {e}"
                                ) from None
        return path
    try:
        path = resolve_asset(asset.graph_path, asset.base_url, asset.graph_checksum, asset.is_archive,
                             manifest_dir=loaded.directory, progress=True)
    except AssetError as e:  # where it was named, so the user knows which line to fix
        raise ManifestError(loaded.path, "model.graph_path", str(e)) from None
    if asset.is_archive:
        if not asset.model_file:
            raise ManifestError(loaded.path, "model.model_file", "an archive needs the model's path inside it")
        path = path / asset.model_file
        if not path.exists():
            raise ManifestError(loaded.path, "model.model_file", f"{asset.model_file} is not in the archive")
        if not path.is_dir():
            check_regular_file(path, "model file", error=lambda m: ManifestError(loaded.path, "model.model_file", m))
    return path


def resolve_weights_file(loaded: LoadedManifest) -> Path | None:
    asset = loaded.model.model
    if asset is None or asset.weights_path is None or asset.factory is None:
        return None
    try:
        return resolve_asset(asset.weights_path, asset.base_url, asset.weights_checksum,
                             manifest_dir=loaded.directory, progress=True)
    except AssetError as e:
        raise ManifestError(loaded.path, "model.weights_path", str(e)) from None


def check_framework_version(loaded: LoadedManifest, ignore: bool) -> str:
    from packaging.specifiers import SpecifierSet

    fw = loaded.model.framework
    candidates = FRAMEWORK_PACKAGES.get(fw.name, fw.name)
    candidates = (candidates,) if isinstance(candidates, str) else candidates
    installed = None
    for package in candidates:
        try:
            installed = importlib.metadata.version(package)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    if installed is None:
        from mlharness.extras import hint_for_framework

        advice = hint_for_framework(fw.name) or f"pip install {candidates[0]}"
        raise PredictorError(f"framework '{fw.name}' needs the Python package '{candidates[0]}', which is not "
                             f"installed: {advice}")
    spec = fw.version.strip()
    if spec in ("", "*", "latest"):
        return installed
    if is_bare_version(spec):
        if spec != installed:
            log.warning("%s was made with %s %s; running on %s", loaded.path, package, spec, installed)
        return installed
    if installed not in SpecifierSet(spec, prereleases=True) and not ignore:
        raise PredictorError(f"{loaded.path}: framework.version requires {package}{spec}, but {installed} is "
                             f"installed (--ignore-framework-version to run anyway)")
    return installed


@dataclass(frozen=True)
class Instances:
    """How a run's predictor sessions are made: how many, on which device, with how many framework threads each,
    pinned to which cores, and whether the framework profiles (a trace level that asks for it)."""

    count: int = 1
    device: str = "cpu"
    threads: int | None = None  # framework intra-op threads
    threads_per_instance: int | None = None  # default with several instances: the cores split evenly
    affinity: list[set[int]] | None = None  # --pin-cores: the cores of each instance
    profile: bool = False


def make_predictor(loaded: LoadedManifest, model_file: Path | None, batch: int, *, device: str = "cpu",
                   threads: int | None = None, profile: bool = False, weights_file: Path | None = None) -> Predictor:
    """A loaded predictor. ``weights_file``: the factory's resolved state dict (resolved here when not given)."""
    m = loaded.model
    if weights_file is None:
        weights_file = resolve_weights_file(loaded)
    config = PredictorConfig(
        model_path=str(model_file) if model_file else None,
        input_names=[i.name for i in m.inputs],
        output_names=[] if loaded.fetch_all_outputs else [o.name for o in m.outputs],  # [] = every output
        device=device,
        threads=threads,
        options=dict(m.framework.options),
        max_batchsize=batch,
        factory=m.model.factory if m.model else None,
        weights_path=str(weights_file) if weights_file else None,
        input_specs=[i.model_dump() for i in m.inputs],
        output_specs=[o.model_dump() for o in m.outputs],
        model_name=m.name,
        manifest_path=str(loaded.path),
        profile=profile,
        generation=generation_config(m.generation, m.response.text) if streams_tokens(m) else None,
    )
    predictor = PREDICTORS.get(m.framework.name)(config)
    predictor.load()
    return predictor


def make_instances(loaded: LoadedManifest, spec: Instances, model_file: Path | None, batch: int,
                   say: Callable[[str], None] | None = None) -> list[Predictor]:
    """``spec.count`` predictor sessions; with several, the cores are split between them unless
    ``threads_per_instance`` says otherwise (two sessions each grabbing every core would fight). With
    ``spec.affinity`` (core pinning), instance i is created pinned to its cores and uses that many threads."""
    n = max(1, spec.count)
    say_model_swap(loaded, say)
    threads = spec.threads_per_instance or spec.threads
    if n > 1 and threads is None:
        threads = max(1, (os.cpu_count() or 1) // n)
    weights_file = resolve_weights_file(loaded)  # once: verifying a large state dict's checksum takes seconds
    predictors: list[Predictor] = []
    try:
        for i in range(n):
            cores = spec.affinity[i] if spec.affinity else None
            with pinned(cores):
                predictors.append(make_predictor(
                    loaded, model_file, batch, device=spec.device, threads=threads or (len(cores) if cores else None),
                    profile=spec.profile, weights_file=weights_file))
            if i == 0:  # the declared outputs against the model's own, before LoadGen starts
                check_declared_outputs(loaded, predictors[0])
    except BaseException:
        for p in predictors:
            p.close()
        raise
    return predictors


def say_model_swap(loaded: LoadedManifest, say: Callable[[str], None] | None) -> None:
    """A model swapped in with $MLHARNESS_MODEL_FILE is said in the run's normal output: the results are not the
    manifest's model's."""
    for note in loaded.notes:
        if f"${MODEL_FILE_ENV}" in note:
            if say is not None:
                say(f"{loaded.path}: {note}")
            else:
                log.warning("%s: %s", loaded.path, note)


# what a run hashes of its model for mlharness_run.json: beyond this the file is named but not hashed (reading a
# model of tens of GB again at the end of every run would take minutes)
HASH_LIMIT_BYTES = 4 << 30
_HASHED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256: each model file read once


def model_file_facts(loaded: LoadedManifest, model_path: str | None) -> dict[str, object] | None:
    """The model file the run loaded, for the run metadata: its path, kind (file or folder), size and sha256 (the
    manifest's verified sha256 when it declares one; a folder's is the digest of its files' names and sha256s)."""
    if not model_path:
        return None
    path = Path(model_path)
    facts: dict[str, object] = {"path": str(path.resolve()), "kind": "folder" if path.is_dir() else "file"}
    try:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        size = sum(p.stat().st_size for p in files)
    except OSError as e:
        return {**facts, "sha256": None, "sha256_note": f"not readable: {e.strerror or e}"}
    facts["bytes"] = size
    if any(f"${MODEL_FILE_ENV}" in note for note in loaded.notes):
        facts["set_by"] = f"${MODEL_FILE_ENV}"
    asset = loaded.model.model
    declared = asset.graph_checksum if asset is not None and not (asset.is_archive or asset.generator) else None
    algorithm, digest = parse_checksum(declared) if declared else ("", "")
    if algorithm == "sha256":  # resolve_asset verified the file against it before the model loaded
        return {**facts, "sha256": digest, "sha256_from": "the manifest's verified checksum"}
    if size > HASH_LIMIT_BYTES:
        return {**facts, "sha256": None, "sha256_note": f"not computed: {size / (1 << 30):.1f} GiB is over the "
                                                        f"{HASH_LIMIT_BYTES >> 30} GiB a run hashes"}
    return {**facts, "sha256": _digest(path, files)}


def _digest(root: Path, files: list[Path]) -> str:
    import hashlib

    def one(p: Path) -> str:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _HASHED:
            _HASHED[key] = hash_file(p, "model file", error=AssetError)
        return _HASHED[key]

    if not root.is_dir():
        return one(root)
    listing = hashlib.sha256()
    for p in files:
        listing.update(f"{p.relative_to(root).as_posix()}\0{one(p)}\n".encode())
    return listing.hexdigest()


def check_outputs_by_running(loaded: LoadedManifest, pipeline: Any, loader: Any) -> None:
    """For a model whose framework does not describe its outputs before running (TorchScript, factories, remote
    agents): the declared outputs against what it returns for the first sample, loaded for the purpose and run
    once before anything is timed. A predict hook's outputs are its own business and are not checked."""
    if "predict" in pipeline.hooks or loaded_outputs(pipeline.predictor) is not None:
        return
    progress, loader.on_progress = loader.on_progress, None
    try:
        try:
            loader.load([0])
            outputs = pipeline.infer(pipeline.store.gather(np.asarray([0], dtype=np.int64)))
        finally:
            loader.unload([0])
            loader.on_progress = progress
    except Exception as e:  # a sample's hook or the model failed: the run fails as it would have inside LoadGen
        if isinstance(e, MLHarnessError):
            raise RunFailed(f"the run failed: {e}") from e
        raise RunFailed(f"the run failed: {type(e).__name__}: {e}") from e
    check_first_outputs(loaded, pipeline.predictor, outputs)
