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

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, check_regular_file, parse_json, read_text_bounded

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
    path = root if root.exists() and not root.is_dir() else root / name
    if not path.exists():
        raise DatasetError(f"LibriSpeech: no manifest {name} in {root} (the folder download_dataset.sh fills, or "
                           f"one `mlharness dataset synth librispeech` wrote)")
    return check_regular_file(path, "LibriSpeech: manifest", error=DatasetError)


def _audio_path(fname: str, data_dir: Path) -> Path:
    # exists(), not is_file(): a FIFO or a device at the name is refused as what it is when the clip is read
    path = Path(os.path.join(data_dir, fname))
    if path.exists():
        return path
    moved = data_dir / Path(fname).parent.name / Path(fname).name
    return moved if moved.exists() else path


def _stated(value: Any, where: str, field: str, what: str) -> float:
    """A duration the manifest states: a finite number of seconds, not negative."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0:
        raise DatasetError(f"{where}: field '{field}' is {value!r}; expected {what}")
    return seconds


def _clip_facts(rec: dict[str, Any], file: dict[str, Any], where: str) -> float:
    """The clip's stated duration (the file's ``duration``, else the entry's ``original_duration``), its stated
    sample rate checked to be a sample rate."""
    from mlharness.tasks.librispeech.audio import check_sample_rate

    if "sample_rate" in file:
        check_sample_rate(file["sample_rate"], f"{where}: field 'files[].sample_rate'")
    if "duration" in file:
        return _stated(file["duration"], where, "files[].duration", "the clip's length in seconds")
    return _stated(rec["original_duration"], where, "original_duration", "the clip's length in seconds")


class LibriSpeech:
    """The clips of one manifest JSON, in the order the reference's QSL indexes them."""

    def __init__(self, manifest: Path | str, data_dir: Path | str | None = None,
                 max_duration: float = MAX_DURATION):
        self.path = Path(manifest)
        self.data_dir = Path(data_dir) if data_dir is not None else self.path.parent
        text = read_text_bounded(self.path, "LibriSpeech: manifest", DATA_FILE_LIMIT, error=DatasetError)
        try:
            records = parse_json(text, f"LibriSpeech: manifest {self.path}", error=DatasetError)
        except ValueError as e:
            raise DatasetError(f"LibriSpeech: cannot read {self.path}: {e}") from e
        if not isinstance(records, list):
            raise DatasetError(f"LibriSpeech: {self.path} is not a JSON array of clips")
        self.records: list[dict[str, Any]] = []
        for n, rec in enumerate(records):
            where = f"LibriSpeech: {self.path}: entry {n}"
            try:
                duration = _stated(rec["original_duration"], where, "original_duration", "seconds")
                files = [f for f in rec["files"] if f["speed"] == 1]
            except (KeyError, TypeError, ValueError) as e:
                raise DatasetError(f"{where} lacks {e} (expected transcript, files, original_duration)") from e
            if duration > max_duration or not isinstance(rec.get("transcript"), str):
                continue  # as manifest.py filters
            if not files:
                raise DatasetError(f"{where} has no file at speed 1")
            if not isinstance(files[0], dict) or "fname" not in files[0]:
                raise DatasetError(f"{where}: its file at speed 1 has no 'fname'")
            self.records.append({"transcript": rec["transcript"], "labels": parse_transcript(rec["transcript"]),
                                 "audio": _audio_path(str(files[0]["fname"]), self.data_dir),
                                 "duration": duration, "seconds": _clip_facts(rec, files[0], where),
                                 "entry": n})

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

    def _where(self, index: int) -> str:
        return f"LibriSpeech: {self.path}: entry {self._record(index)['entry']} (sample {index}): "

    def check_audio(self, count: int | None = None) -> None:
        """Check the headers of the first ``count`` clips (all by default), none of their samples read: each a
        regular file, its length the one its entry states, within the bounds of :mod:`.audio`. A run calls it
        before the model loads, so a bad clip is a bad input named at once, not a failed run."""
        from mlharness.tasks.librispeech.audio import audio_header

        for index in range(len(self) if count is None else min(count, len(self))):
            audio_header(self.audio_path(index), self._record(index)["seconds"], self._where(index))

    def audio(self, index: int, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """The clip as a mono float32 waveform at ``sample_rate`` (what the reference's QSL gives its model)."""
        from mlharness.tasks.librispeech.audio import load_audio

        return load_audio(self.audio_path(index), sample_rate, self._record(index)["seconds"], self._where(index))

    def pcm16(self, index: int) -> np.ndarray:
        """The clip's 16-bit sample values (int32) at 16 kHz: a prompt key for test models."""
        from mlharness.tasks.librispeech.audio import pcm16

        return pcm16(self.audio(index))
