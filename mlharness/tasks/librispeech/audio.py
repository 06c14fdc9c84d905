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

Every file is bounded at the door: it must be a regular file (a FIFO, a device or a folder is named as what it
is), and its header is read before its samples: a sample rate outside ``SAMPLE_RATE_RANGE``, more than
``MAX_CHANNELS`` channels or more than ``MAX_CLIP_SECONDS`` of audio is refused, naming the file, before anything
is allocated for it (a sparse WAV of ten hours, a FLAC header claiming 2^36 samples). A caller that knows how long
the clip should be (the whisper dataset's ``duration``) has that checked against the header too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import open_regular

MAX_CLIP_SECONDS = 600.0
"""Most audio read for one clip (10 min): whisper's clips are at most 30 s."""
SAMPLE_RATE_RANGE = (1_000, 384_000)
"""Sample rates accepted in a file's header, a manifest's ``parameters.sample_rate`` and a dataset's entries
(Hz): telephone audio up to the highest rate audio interfaces record."""
MAX_CHANNELS = 64
DURATION_TOLERANCE_S = 0.5
DURATION_TOLERANCE_FRACTION = 0.05
"""A clip may differ from the duration its dataset states by 0.5 s or 5 %, whichever is more."""


def check_sample_rate(rate: Any, what: str) -> int:
    """``rate`` as an int when it is a whole number of Hz in ``SAMPLE_RATE_RANGE``; else a DatasetError naming
    ``what``."""
    lo, hi = SAMPLE_RATE_RANGE
    number = isinstance(rate, int | float) and not isinstance(rate, bool) and math.isfinite(rate)
    if not number or rate != int(rate) or not lo <= int(rate) <= hi:
        raise DatasetError(f"{what} is {rate!r}; a sample rate is a whole number of Hz from {lo} to {hi}")
    return int(rate)


@dataclass(frozen=True)
class AudioHeader:
    frames: int
    rate: int
    channels: int

    @property
    def seconds(self) -> float:
        return self.frames / self.rate


def _checked_header(snd: Any, path: Path, where: str, expected_seconds: float | None) -> AudioHeader:
    rate = check_sample_rate(snd.samplerate, f"{where}the sample rate in the header of audio file {path}")
    if not 1 <= snd.channels <= MAX_CHANNELS:
        raise DatasetError(f"{where}audio file {path} claims {snd.channels} channels; at most {MAX_CHANNELS} are "
                           "read")
    header = AudioHeader(int(snd.frames), rate, int(snd.channels))
    holds = f"audio file {path} holds {header.seconds:.2f} s ({header.frames} samples at {rate} Hz)"
    if not 0 <= header.seconds <= MAX_CLIP_SECONDS:
        raise DatasetError(f"{where}{holds}, more than the {MAX_CLIP_SECONDS:g} s read for one clip; check that it "
                           "is the right file")
    if expected_seconds is not None:
        slack = max(DURATION_TOLERANCE_S, DURATION_TOLERANCE_FRACTION * expected_seconds)
        if abs(header.seconds - expected_seconds) > slack:
            raise DatasetError(f"{where}{holds}, but its dataset entry states {expected_seconds:g} s; the file or "
                               "the entry is wrong")
    return header


def _read(path: Path, where: str, samples: bool, expected_seconds: float | None) -> tuple[AudioHeader, Any]:
    """The checked header of ``path`` and, when ``samples``, its samples (float32)."""
    try:
        import soundfile
    except ImportError as e:
        raise DatasetError("reading audio needs the soundfile package: pip install 'mlharness[speech]'") from e
    # opened by fileguard (non-blocking, checked on the descriptor): a FIFO or a device is refused, never read
    with open_regular(path, "audio file", error=lambda m: DatasetError(f"{where}{m}")) as raw:
        try:
            with soundfile.SoundFile(raw) as snd:
                header = _checked_header(snd, path, where, expected_seconds)
                data = snd.read(header.frames, dtype="float32", always_2d=False) if samples else None
        except (OSError, RuntimeError, soundfile.LibsndfileError) as e:
            raise DatasetError(f"{where}cannot read audio file {path}: {e}") from e
    return header, data


def audio_header(path: Path | str, expected_seconds: float | None = None, where: str = "") -> AudioHeader:
    """The checked header of ``path``, none of its samples read; ``where`` begins every error message."""
    return _read(Path(path), where, False, expected_seconds)[0]


def read_audio(path: Path | str, expected_seconds: float | None = None, where: str = "") -> tuple[np.ndarray, int]:
    """The waveform of ``path`` as float32 (samples,) or (samples, channels), and its sample rate; the header is
    checked (see the module doc) before any sample is read."""
    header, data = _read(Path(path), where, True, expected_seconds)
    return np.asarray(data, dtype=np.float32), header.rate


def resample(wave: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``wave`` (mono, float32) from ``rate`` to ``target`` Hz with soxr's HQ quality (unchanged when equal)."""
    check_sample_rate(rate, "the audio's sample rate")
    check_sample_rate(target, "the sample rate to resample to")
    if rate == target:
        return wave
    try:
        import soxr
    except ImportError as e:
        raise DatasetError("resampling audio needs the soxr package: pip install 'mlharness[speech]'") from e
    return np.asarray(soxr.resample(wave, rate, target, quality="HQ"), dtype=np.float32)


def load_audio(path: Path | str, sample_rate: int | None = None, expected_seconds: float | None = None,
               where: str = "") -> np.ndarray:
    """The mono float32 waveform of ``path``, resampled to ``sample_rate`` Hz when given (``expected_seconds``
    and ``where``: see :func:`read_audio`)."""
    if sample_rate is not None:
        check_sample_rate(sample_rate, f"{where}the sample rate to read audio file {path} at")
    wave, rate = read_audio(path, expected_seconds, where)
    if wave.ndim == 2:
        wave = wave.mean(axis=1, dtype=np.float32)
    if wave.size == 0:
        raise DatasetError(f"{where}audio file {path} holds no samples")
    return np.ascontiguousarray(resample(wave, rate, int(sample_rate or rate)))


def input_sample_rate(ctx: dict[str, Any]) -> int:
    """``parameters.sample_rate`` of the run's first ``type: audio`` input."""
    for spec in ctx.get("inputs") or []:
        if spec.get("type") == "audio":
            rate = (spec.get("parameters") or {}).get("sample_rate")
            if rate is None:
                raise DatasetError(f"input '{spec.get('name')}' (type: audio) needs parameters.sample_rate, the "
                                   "samples per second its model takes")
            return check_sample_rate(rate, f"input '{spec.get('name')}' (type: audio): parameters.sample_rate")
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
