"""What the whisper dataset manifest's hooks call: the dataset of a run, from --dataset-path or the synthetic set
in the cache."""

from __future__ import annotations

from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.librispeech.dataset import MANIFEST_FILE, LibriSpeech, dataset_file
from mlharness.tasks.librispeech.synth import ensure_synthetic_librispeech, synthetic_dir


def librispeech_dataset(ctx: dict[str, Any], count: int | None = None) -> LibriSpeech:
    """For the dataset manifest's ``init``: the manifest JSON named by ``dataset_attributes.file`` in
    ``ctx["dataset_path"]`` or, for manifests whose ``attributes.synthetic_librispeech`` is set and no path was
    given, the synthetic set in the cache. Sets ``ctx["dataset_path"]`` (the folder) for the accuracy metric.
    The headers of the clips the run uses (the first ``count``, all when it is 0 or None) are checked here, before
    the model loads."""
    attrs = ctx.get("dataset_attributes") or {}
    name = str((ctx.get("attributes") or {}).get("dataset_file") or attrs.get("file") or MANIFEST_FILE)
    root = ctx.get("dataset_path")
    if not root:
        if not (ctx.get("attributes") or {}).get("synthetic_librispeech"):
            raise DatasetError(f"whisper needs --dataset-path: the folder holding {name} and dev-all-repack/ "
                               f"(speech2text/download_dataset.sh of the MLCommons reference, see docs/speech.md)")
        root = ensure_synthetic_librispeech(synthetic_dir())
    path = dataset_file(root, name)
    data = LibriSpeech(path)
    data.check_audio(count or None)
    ctx["dataset_path"] = str(path.parent)
    return data
