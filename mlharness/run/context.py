"""What the hooks see and what the dataset holds: the context a manifest's hooks get (``ctx``), the dataset size
its ``init()`` reports, and the number of threads that pre-process samples at load time. Shared by runs, agents
and model sessions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError, SettingsError
from mlharness.fileguard import check_file_or_folder
from mlharness.kinds.registry import make_input
from mlharness.loadgen.qsl import INPUT_KIND, check_sample_count
from mlharness.manifest.historical import missing_dataset
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import LoadedManifest


def build_context(loaded: LoadedManifest, batch_size: int, *, scenario: str, mode: str, device: str = "cpu",
                  dataset_path: str | Path | None = None, count: int | None = None) -> dict[str, Any]:
    m = loaded.model
    ds_path = dataset_path
    if ds_path is not None:  # a mistyped path is an error here, before any hook could generate data into it
        check_file_or_folder(Path(ds_path), "--dataset-path", error=DatasetError)
    if ds_path is None and loaded.dataset is not None and loaded.dataset.path:
        ds_path = loaded.dataset_directory / Path(loaded.dataset.path).expanduser()
    ctx = {
        "name": m.name,
        "version": m.version,
        "framework": m.framework.name,
        "inputs": [i.model_dump() for i in m.inputs],
        "outputs": [o.model_dump() for o in m.outputs],
        "attributes": dict(m.attributes),
        "dataset_attributes": dict(loaded.dataset.attributes) if loaded.dataset else {},
        "batch_size": batch_size,
        "scenario": scenario,
        "mode": mode,
        "device": device,
        "dataset_path": str(ds_path) if ds_path is not None else None,
        "manifest_dir": str(loaded.directory),
        "count": count,
    }
    # an input that is not a tensor: what its kind asks (a graph input opens its graph here, once for the run)
    ctx[INPUT_KIND] = make_input(ctx, str(loaded.path))
    return ctx


def sample_count(hooks: HookSet, count: int | None, ctx: dict[str, Any]) -> int:
    """The dataset size: ``init()``'s answer (or --count alone), at most --count; recorded in ``ctx``."""
    reason = missing_dataset(hooks.loaded)
    if reason:  # with --count alone its hooks would get sample numbers
        raise DatasetError(reason)
    cap = hooks.sample_cap(ctx)  # before_preprocess: None, or a positive int that caps the count
    if cap is not None:
        count = min(count, cap) if count else cap
    if "init" in hooks:
        total = check_sample_count(hooks, count, hooks.call("init", count))
    elif count:
        total = count
    else:
        raise DatasetError("no dataset size: the manifest has no dataset init() hook; pass --count")
    ctx["count"] = total
    return total


def resolve_load_workers(requested: int | None, loaded: LoadedManifest) -> int:
    """--load-workers, else the dataset manifest's ``load_workers``, else 1; 0 means one thread per CPU core."""
    workers = requested
    if workers is None and loaded.dataset is not None:
        workers = loaded.dataset.load_workers
    if workers is None:
        return 1
    if workers < 0:
        raise SettingsError(f"--load-workers must be >= 0, got {workers}")
    return workers or os.cpu_count() or 1
