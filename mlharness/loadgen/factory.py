"""The predictor factory: a manifest's model file (generated, or downloaded and checksum-verified), the framework
version it asks for, and loaded predictor instances (several side by side, optionally pinned to their cores)."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
from dataclasses import replace
from pathlib import Path

from mlharness.errors import AssetError, ManifestError, PredictorError
from mlharness.fileguard import check_regular_file
from mlharness.loadgen.options import RunOptions
from mlharness.loadgen.pinning import pinned
from mlharness.manifest.assets import cache_dir, resolve_asset
from mlharness.manifest.loader import LoadedManifest, is_bare_version
from mlharness.manifest.schema import streams_tokens
from mlharness.manifest.targets import run_generator
from mlharness.predictors import FRAMEWORK_PACKAGES, PREDICTORS
from mlharness.predictors.base import Predictor, PredictorConfig
from mlharness.predictors.generative import generation_config
from mlharness.telemetry.observe import wants_profile

log = logging.getLogger(__name__)


def resolve_model_file(loaded: LoadedManifest) -> Path | None:
    asset = loaded.model.model
    if asset is None or asset.graph_path is None:
        return None
    if asset.generator:
        target = cache_dir() / "generated" / loaded.model.name / Path(asset.graph_path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        return run_generator(loaded, target)  # bounded in time, unable to end the process
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
        raise PredictorError(f"framework '{fw.name}' needs the Python package '{candidates[0]}', which is not "
                             f"installed (try: pip install 'mlharness[all]')")
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


def make_predictor(loaded: LoadedManifest, opts: RunOptions, model_file: Path | None, batch: int,
                   weights_file: Path | None = None) -> Predictor:
    """A loaded predictor. ``weights_file``: the factory's resolved state dict (resolved here when not given)."""
    m = loaded.model
    if weights_file is None:
        weights_file = resolve_weights_file(loaded)
    config = PredictorConfig(
        model_path=str(model_file) if model_file else None,
        input_names=[i.name for i in m.inputs],
        output_names=[] if loaded.fetch_all_outputs else [o.name for o in m.outputs],  # [] = every output
        device=opts.device,
        threads=opts.threads,
        options=dict(m.framework.options),
        max_batchsize=batch,
        factory=m.model.factory if m.model else None,
        weights_path=str(weights_file) if weights_file else None,
        input_specs=[i.model_dump() for i in m.inputs],
        output_specs=[o.model_dump() for o in m.outputs],
        model_name=m.name,
        manifest_path=str(loaded.path),
        profile=wants_profile(opts.trace),
        generation=generation_config(m.generation) if streams_tokens(m) else None,
    )
    predictor = PREDICTORS.get(m.framework.name)(config)
    predictor.load()
    return predictor


def make_instances(loaded: LoadedManifest, opts: RunOptions, model_file: Path | None, batch: int,
                   affinity: list[set[int]] | None = None) -> list[Predictor]:
    """``opts.instances`` predictor sessions; with several, the cores are split between them unless
    ``threads_per_instance`` says otherwise (two sessions each grabbing every core would fight). With
    ``affinity`` (core pinning), instance i is created pinned to ``affinity[i]`` and uses that many threads."""
    n = max(1, opts.instances)
    threads = opts.threads_per_instance or opts.threads
    if n > 1 and threads is None:
        threads = max(1, (os.cpu_count() or 1) // n)
    weights_file = resolve_weights_file(loaded)  # once: verifying a large state dict's checksum takes seconds
    predictors: list[Predictor] = []
    try:
        for i in range(n):
            cores = affinity[i] if affinity else None
            per = replace(opts, threads=threads or (len(cores) if cores else None))
            with pinned(cores):
                predictors.append(make_predictor(loaded, per, model_file, batch, weights_file))
    except BaseException:
        for p in predictors:
            p.close()
        raise
    return predictors
