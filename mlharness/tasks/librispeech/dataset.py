"""The whisper benchmark's dataset: LibriSpeech dev-clean + dev-other as the reference prepares it.

``download_dataset.sh`` converts the FLAC files to 16 kHz WAV (``utils/convert_librispeech.py``, manifest
``dev-all.json``), then ``utils/repackage_librispeech.py`` joins consecutive utterances of one chapter, with 0.5 s of
silence between them, into clips of at most 30 s: ``dev-all-repack/<speaker>-<chapter>_<n>.wav`` and the manifest
``dev-all-repack.json`` (1633 clips), a JSON array of::

    {"transcript": "lower case words ...", "files": [{"fname": ".../dev-all-repack/84-121123_0.wav",
     "sample_rate": 16000.0, "duration": 21.3, "num_samples": ..., "speed": 1, ...}],
     "original_duration": 21.3, "original_num_samples": ...}

The sample order is the manifest's, less the clips longer than ``MAX_DURATION`` (30 s), which ``manifest.py``
drops (the QSL indices count the clips kept). A clip's audio is ``<dataset dir>/<fname>``; the reference writes
absolute names, so a folder that was moved is found by the last two parts of the name instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError

MANIFEST_FILE = "dev-all-repack.json"
AUDIO_DIR = "dev-all-repack"
SAMPLE_RATE = 16000
MAX_DURATION = 30.0
OFFICIAL_COUNT = 1633

# accuracy_eval.py's label set: a transcript is scored as these characters (others are dropped from the
# reference) and the response holds indices into it
LABELS = [" ", *"abcdefghijklmnopqrstuvwxyz", "'", *"0123456789", "$", "%", "+", "-"]
LABEL_INDEX = {c: i for i, c in enumerate(LABELS)}


def parse_transcript(text: str) -> list[int]:
    """A transcript as label indices, characters outside the label set dropped (``Manifest.parse_transcript``)."""
    return [LABEL_INDEX[c] for c in text if c in LABEL_INDEX]


def text_to_labels(text: str) -> list[int]:
    """A model's transcript as the reference SUT answers it: lower case, stripped, characters outside the labels
    dropped."""
    return parse_transcript(text.lower().strip())


def labels_to_text(ids: Any, where: str = "") -> str:
    """Label indices back to text (``__gather_predictions``); an index outside the label set is an error."""
    out = []
    for i in ids:
        if not 0 <= int(i) < len(LABELS):
            raise DatasetError(f"{where}label index {int(i)} is outside the {len(LABELS)} labels of the whisper "
                               f"benchmark (0..{len(LABELS) - 1})")
        out.append(LABELS[int(i)])
    return "".join(out)


def dataset_file(root: Path | str, name: str = MANIFEST_FILE) -> Path:
    """The manifest JSON: ``root`` itself when it is a file, else ``root/name``."""
    root = Path(root).expanduser()
    path = root if root.is_file() else root / name
    if not path.is_file():
        raise DatasetError(f"LibriSpeech: no manifest {name} in {root} (the folder download_dataset.sh fills, or "
                           f"one `mlharness dataset synth librispeech` wrote)")
    return path


def _audio_path(fname: str, data_dir: Path) -> Path:
    path = Path(os.path.join(data_dir, fname))
    if path.is_file():
        return path
    moved = data_dir / Path(fname).parent.name / Path(fname).name
    return moved if moved.is_file() else path


class LibriSpeech:
    """The clips of one manifest JSON, in the order the reference's QSL indexes them."""

    def __init__(self, manifest: Path | str, data_dir: Path | str | None = None,
                 max_duration: float = MAX_DURATION):
        self.path = Path(manifest)
        self.data_dir = Path(data_dir) if data_dir is not None else self.path.parent
        try:
            records = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise DatasetError(f"LibriSpeech: cannot read {self.path}: {e}") from e
        if not isinstance(records, list):
            raise DatasetError(f"LibriSpeech: {self.path} is not a JSON array of clips")
        self.records: list[dict[str, Any]] = []
        for n, rec in enumerate(records):
            where = f"LibriSpeech: {self.path}: entry {n}"
            try:
                duration = float(rec["original_duration"])
                files = [f for f in rec["files"] if f["speed"] == 1]
            except (KeyError, TypeError, ValueError) as e:
                raise DatasetError(f"{where} lacks {e} (expected transcript, files, original_duration)") from e
            if duration > max_duration or not isinstance(rec.get("transcript"), str):
                continue  # as manifest.py filters
            if not files:
                raise DatasetError(f"{where} has no file at speed 1")
            self.records.append({"transcript": rec["transcript"], "labels": parse_transcript(rec["transcript"]),
                                 "audio": _audio_path(str(files[0]["fname"]), self.data_dir),
                                 "duration": duration})

    def __len__(self) -> int:
        return len(self.records)

    def _record(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self.records):
            raise DatasetError(f"LibriSpeech: sample {index} is outside the {len(self.records)} clips of {self.path}")
        return self.records[index]

    def reference(self, index: int) -> str:
        """The reference transcript as accuracy_eval.py scores it (characters outside the labels dropped)."""
        return labels_to_text(self._record(index)["labels"])

    def labels(self, index: int) -> list[int]:
        return list(self._record(index)["labels"])

    def audio_path(self, index: int) -> Path:
        return Path(self._record(index)["audio"])

    def audio(self, index: int, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """The clip as a mono float32 waveform at ``sample_rate`` (what the reference's QSL gives its model)."""
        from mlharness.tasks.librispeech.audio import load_audio

        path = self.audio_path(index)
        if not path.is_file():
            raise DatasetError(f"LibriSpeech: sample {index}: audio file {path} does not exist")
        return load_audio(path, sample_rate)

    def pcm16(self, index: int) -> np.ndarray:
        """The clip's 16-bit sample values (int32) at 16 kHz: a prompt key for test models."""
        from mlharness.tasks.librispeech.audio import pcm16

        return pcm16(self.audio(index))
