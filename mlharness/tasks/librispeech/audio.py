"""Audio inputs for any manifest: read a sound file as a mono float32 waveform at the model's sample rate.

A manifest declares an audio input as ``type: audio`` with the rate its model expects in
``parameters.sample_rate``; its ``preprocess`` hook calls :func:`audio_input` with the file, which reads the rate
from the run's ``ctx`` (or :func:`load_audio` with the rate itself)::

    inputs:
      - {name: input_values, type: audio, element_type: float32, shape: [-1], parameters: {sample_rate: 16000}}
    preprocess: |
      from mlharness.tasks.librispeech.audio import audio_input

      def preprocess(ctx, path):
          return audio_input(ctx, path)        # float32 in [-1, 1], shape (samples,), at 16 kHz

Files are read with ``soundfile`` (WAV, FLAC, OGG/Vorbis, ...). A file at another rate is resampled with
``soxr`` at its "HQ" quality, what ``librosa.load(path, sr=rate)`` does by default (the whisper reference reads
its clips that way). Several channels are averaged into one, as librosa's ``mono=True`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError


def read_audio(path: Path | str) -> tuple[np.ndarray, int]:
    """The waveform of ``path`` as float32 (samples,) or (samples, channels), and its sample rate."""
    try:
        import soundfile
    except ImportError as e:
        raise DatasetError("reading audio needs the soundfile package: pip install 'mlharness[speech]'") from e
    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=False)
    except (OSError, RuntimeError, soundfile.LibsndfileError) as e:
        raise DatasetError(f"cannot read audio file {path}: {e}") from e
    return np.asarray(data, dtype=np.float32), int(rate)


def resample(wave: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``wave`` (mono, float32) from ``rate`` to ``target`` Hz with soxr's HQ quality (unchanged when equal)."""
    if rate <= 0 or target <= 0:
        raise DatasetError(f"sample rates must be positive, got {rate} -> {target}")
    if rate == target:
        return wave
    try:
        import soxr
    except ImportError as e:
        raise DatasetError("resampling audio needs the soxr package: pip install 'mlharness[speech]'") from e
    return np.asarray(soxr.resample(wave, rate, target, quality="HQ"), dtype=np.float32)


def load_audio(path: Path | str, sample_rate: int | None = None) -> np.ndarray:
    """The mono float32 waveform of ``path``, resampled to ``sample_rate`` Hz when given."""
    wave, rate = read_audio(path)
    if wave.ndim == 2:
        wave = wave.mean(axis=1, dtype=np.float32)
    if wave.size == 0:
        raise DatasetError(f"audio file {path} holds no samples")
    return np.ascontiguousarray(resample(wave, rate, int(sample_rate or rate)))


def input_sample_rate(ctx: dict[str, Any]) -> int:
    """``parameters.sample_rate`` of the run's first ``type: audio`` input."""
    for spec in ctx.get("inputs") or []:
        if spec.get("type") == "audio":
            rate = (spec.get("parameters") or {}).get("sample_rate")
            if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
                raise DatasetError(f"input '{spec.get('name')}' (type: audio) needs parameters.sample_rate, a "
                                   f"positive number of samples per second; got {rate!r}")
            return rate
    raise DatasetError("the manifest declares no input of type: audio (with parameters.sample_rate)")


def audio_input(ctx: dict[str, Any], path: Path | str) -> np.ndarray:
    """The mono float32 waveform of ``path`` at the rate of the manifest's audio input."""
    return load_audio(path, input_sample_rate(ctx))


def write_audio(path: Path | str, wave: np.ndarray, sample_rate: int) -> Path:
    """Write ``wave`` (float32 in [-1, 1]) as 16-bit PCM WAV, the format of the reference's converted clips."""
    import soundfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), np.clip(wave, -1.0, 1.0), int(sample_rate), subtype="PCM_16")
    return path


def pcm16(wave: np.ndarray) -> np.ndarray:
    """A float waveform read from 16-bit PCM back as its integer sample values (int32): exact for such files."""
    return np.rint(np.asarray(wave, dtype=np.float64) * 32768.0).astype(np.int32)
