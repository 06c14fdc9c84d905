"""The whisper test model: the ``model.generator`` of ``whisper-oracle``.

:func:`ensure_oracle_table` writes the ``token-oracle`` framework's table for the synthetic set: each clip's prompt
(its 16-bit sample values, the key :func:`mlharness.tasks.cnndm.models.prompt_key` hashes) -> its reference
transcript as label indices, the response format of the reference SUT. The oracle ends every answer with its
"EOS", here label 0 (a space), which the normaliser drops: WER 0 exactly when the pipeline (audio read and keyed,
indices streamed, decoded, normalised, aligned) is right.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError, MLHarnessError
from mlharness.fileguard import DATA_FILE_LIMIT, check_regular_file, read_bytes_bounded, read_json

TABLE_FORMAT = 1
END_LABEL = 0  # " ": what the oracle appends to each answer


def oracle_table(manifest: Path | str) -> dict[str, Any]:
    """The token-oracle table of one dev-all-repack.json."""
    from mlharness.tasks.cnndm.models import prompt_key
    from mlharness.tasks.librispeech.dataset import LibriSpeech

    clips = LibriSpeech(manifest)
    entries = {prompt_key(clips.pcm16(i)): clips.labels(i) for i in range(len(clips))}
    return {"format": TABLE_FORMAT, "eos_token_id": END_LABEL, "dataset": str(manifest), "entries": entries}


def _source_digest(root: Path) -> str:
    from mlharness.tasks.librispeech.dataset import MANIFEST_FILE
    from mlharness.tasks.librispeech.synth import SYNTH_INFO

    # the synthetic set's manifest (a few KiB a clip) and its one-line record
    manifest = read_bytes_bounded(root / MANIFEST_FILE, "LibriSpeech: manifest", DATA_FILE_LIMIT, error=DatasetError)
    info = read_bytes_bounded(root / SYNTH_INFO, "synthetic LibriSpeech record", 1 << 20, error=DatasetError)
    return hashlib.sha256(manifest + info).hexdigest()


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of whisper-oracle: the table of the synthetic set in the cache (written if needed)."""
    from mlharness.tasks.librispeech.dataset import MANIFEST_FILE
    from mlharness.tasks.librispeech.synth import ensure_synthetic_librispeech, synthetic_dir

    path = Path(path)
    root = ensure_synthetic_librispeech(synthetic_dir())
    source = _source_digest(root)
    if os.path.lexists(path):  # a FIFO or folder there is not a table mlharness wrote: never replaced
        check_regular_file(path, "oracle table", error=DatasetError)
    try:  # label indices of each clip's transcript: well under 1 MiB for the synthetic set
        if read_json(path, "oracle table", DATA_FILE_LIMIT).get("source_sha256") == source:
            return path
    except (MLHarnessError, AttributeError):
        pass
    data = json.dumps({**oracle_table(root / MANIFEST_FILE), "source_sha256": source}, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        f.write(data)
    Path(f.name).replace(path)
    return path
