"""Run a manifest on another model file without editing it: ``MLHARNESS_MODEL_FILE=<path>`` replaces the
manifest's ``model`` (its URL, archive and checksum) by a local file of the same input/output contract, e.g. a
locally built or quantised copy of the published model, or a small stand-in for tests."""

from __future__ import annotations

import os
from pathlib import Path

from mlharness.errors import ManifestError
from mlharness.manifest.schema import ModelAsset, ModelManifest

ENV = "MLHARNESS_MODEL_FILE"


def apply(path: Path, model: ModelManifest) -> tuple[ModelManifest, str | None]:
    """The manifest with ``$MLHARNESS_MODEL_FILE`` as its model, and a one-line note of the swap (None without it)."""
    target = os.environ.get(ENV, "").strip()
    if not target:
        return model, None
    file = Path(target).expanduser().resolve()
    if not file.is_file():
        raise ManifestError(path, "model.graph_path", f"${ENV} names {file}, which is not a file")
    old = model.model
    asset = ModelAsset(graph_path=str(file), factory=old.factory if old else None,
                       features_path=old.features_path if old else None)
    was = (old.graph_path if old else None) or "none"
    return model.model_copy(update={"model": asset}), f"model file {file} (from ${ENV}) instead of {was}"
