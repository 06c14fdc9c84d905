"""A synthetic whisper dataset in the layout the reference's ``download_dataset.sh`` leaves: ``dev-all-repack.json``
and the 16 kHz 16-bit WAV clips in ``dev-all-repack/`` (see :mod:`.dataset`).

Each clip is one chapter's utterances (one to three sentences drawn from a word list) joined with 0.5 s of silence,
as ``repackage_librispeech.py`` joins them. The speech is spoken by ``espeak-ng`` where it is installed; elsewhere
each word becomes a short tone (a signal of the right shape, with no words a model could recognise).
``synth.json`` records which.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError, MLHarnessError
from mlharness.fileguard import DATA_FILE_LIMIT, check_regular_file, read_json
from mlharness.tasks.librispeech.dataset import AUDIO_DIR, MANIFEST_FILE, MAX_DURATION, SAMPLE_RATE

log = logging.getLogger(__name__)

DEFAULT_COUNT = 16
PAD_DURATION = 0.5  # repackage_librispeech.py's silence between utterances
SYNTH_INFO = "synth.json"

WORDS = ("the and of to a in that he was it his i you with as had for her not at she but be is him they on my "
         "all have by so which said me from this one were there when we what an no if would out up them then "
         "could into man time little will now more very about did like some well your our down over good know "
         "old great day before only any upon two made its first long should see after never way much where "
         "mister house back think don't came away again must can't night himself life hand eyes father mother "
         "water light world nothing through something young thought thing went under while head face door room "
         "come looked three people last place years heard asked things seemed yet might say left right told "
         "king garden river morning evening letter horse window church friend voice silence answer island "
         "forty twenty seven hundred o'clock mary john thomas captain doctor").split()


def espeak() -> str | None:
    """The espeak-ng executable, or None when it is not installed."""
    return shutil.which("espeak-ng")


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))


def spoken(text: str, exe: str, workdir: Path) -> np.ndarray:
    """``text`` spoken by espeak-ng, 16 kHz float32."""
    from mlharness.tasks.librispeech.audio import load_audio

    out = workdir / "utterance.wav"
    try:
        subprocess.run([exe, "-v", "en-us", "-s", "170", "-w", str(out), text], check=True, capture_output=True,
                       timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise DatasetError(f"synthetic LibriSpeech: espeak-ng failed on {text!r}: {e}") from e
    return load_audio(out, SAMPLE_RATE)


def tones(text: str) -> np.ndarray:
    """One 0.25 s tone per word (its pitch from the word), 0.08 s apart: 16 kHz float32."""
    parts = []
    t = np.arange(int(0.25 * SAMPLE_RATE)) / SAMPLE_RATE
    gap = np.zeros(int(0.08 * SAMPLE_RATE), np.float32)
    for word in text.split():
        freq = 200.0 + 40.0 * (sum(map(ord, word)) % 40)
        parts += [(0.3 * np.sin(2 * np.pi * freq * t) * np.hanning(t.size)).astype(np.float32), gap]
    return np.concatenate(parts)


def clip_json(wave: np.ndarray, transcript: str, fname: str) -> dict[str, Any]:
    """The manifest entry of a clip, with the fields ``repackage_librispeech.py`` writes."""
    duration = float(len(wave) / SAMPLE_RATE)
    return {"transcript": transcript,
            "files": [{"channels": 1, "sample_rate": float(SAMPLE_RATE), "bitdepth": 16, "bitrate": 256000.0,
                       "duration": duration, "num_samples": int(len(wave)), "encoding": "Signed Integer PCM",
                       "silent": False, "fname": fname, "speed": 1}],
            "original_duration": duration, "original_num_samples": int(len(wave))}


def write_synthetic_librispeech(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0,
                                use_espeak: bool | None = None) -> Path:
    """Write ``count`` clips and ``dev-all-repack.json`` into ``out`` (the manifest last: it marks the set whole).
    ``use_espeak``: None speaks with espeak-ng when installed; False always uses tones."""
    from mlharness.tasks.librispeech.audio import write_audio

    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic LibriSpeech: count must be >= 1, got {count}")
    exe = espeak() if use_espeak is not False else None
    if use_espeak and exe is None:
        raise DatasetError("synthetic LibriSpeech: espeak-ng is not installed (apt-get install espeak-ng)")
    rng = random.Random(seed)
    pad = np.zeros(int(PAD_DURATION * SAMPLE_RATE), np.float32)
    records = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST_FILE).unlink(missing_ok=True)
        shutil.rmtree(out / AUDIO_DIR, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="mlharness-espeak-") as work:
            for i in range(count):
                texts = [sentence(rng) for _ in range(rng.randint(1, 3))]
                waves = [spoken(t, exe, Path(work)) if exe else tones(t) for t in texts]
                wave = np.concatenate([x for w in waves for x in (pad, w)][1:])
                if len(wave) > MAX_DURATION * SAMPLE_RATE:  # never with these sentences; the reference's cap
                    raise DatasetError(f"synthetic LibriSpeech: clip {i} is longer than {MAX_DURATION} s")
                fname = f"{AUDIO_DIR}/{1000 + i}-{2000 + i}_0.wav"
                write_audio(out / fname, wave, SAMPLE_RATE)
                records.append(clip_json(wave, " ".join(texts), fname))
        (out / SYNTH_INFO).write_text(json.dumps({"count": count, "seed": seed,
                                                  "speech": "espeak-ng" if exe else "tones"}), encoding="utf-8")
        with tempfile.NamedTemporaryFile("w", dir=out, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump(records, f, indent=2)
        Path(f.name).replace(out / MANIFEST_FILE)
    except OSError as e:
        raise DatasetError(f"synthetic LibriSpeech: cannot write {out}: {e}") from e
    log.info("wrote %d synthetic LibriSpeech clips to %s (%s)", count, out, "espeak-ng" if exe else "tones")
    return out


def synthetic_dir() -> Path:
    """Where the whisper test manifests keep the synthetic set when no --dataset-path is given."""
    from mlharness.manifest.assets import cache_dir

    return cache_dir() / "librispeech_synth"


def ensure_synthetic_librispeech(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, written unless a complete one of ``count`` clips is there."""
    out = Path(out)
    for name in (SYNTH_INFO, MANIFEST_FILE):  # a FIFO or folder there is not a file mlharness wrote: never replaced
        if os.path.lexists(out / name):
            check_regular_file(out / name, "synthetic LibriSpeech file", error=DatasetError)
    try:
        info = read_json(out / SYNTH_INFO, "synthetic LibriSpeech record", 1 << 20)
        if info.get("count") == count and info.get("seed") == seed and len(
                read_json(out / MANIFEST_FILE, "LibriSpeech: manifest", DATA_FILE_LIMIT)) == count:
            return out
    except (MLHarnessError, AttributeError, TypeError):
        pass
    return write_synthetic_librispeech(out, count, seed)
