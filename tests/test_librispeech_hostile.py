"""whisper's clips bounded at the door: a run over a dataset whose first clip is hostile (a sparse WAV of ten hours,
a FLAC header claiming 2^36 samples, a sample rate of 1 GHz in the header or the dataset JSON, a length other than
the JSON states, a FIFO, a character device, a folder) exits 2 before the model loads, naming the file and the
JSON entry, without a traceback and without reading the samples."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import DatasetError

soundfile = pytest.importorskip("soundfile")
pytest.importorskip("soxr")

RATE = 16000


def wav_header(frames: int, rate: int = RATE) -> bytes:
    """A 16-bit mono PCM WAV header claiming ``frames`` samples."""
    data = frames * 2
    return (b"RIFF" + struct.pack("<I", 36 + data) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16) + b"data" + struct.pack("<I", data))


def flac_header(total_samples: int, rate: int = RATE) -> bytes:
    """A FLAC stream of only its STREAMINFO block: 20 bits of rate, 3 of channels - 1, 5 of bits - 1 and 36 of
    total samples, then an empty MD5."""
    packed = (rate << 44) | (0 << 41) | (15 << 36) | total_samples
    info = struct.pack(">HH", 4096, 4096) + bytes(6) + packed.to_bytes(8, "big") + bytes(16)
    return b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info


@pytest.fixture(scope="module")
def clean_set(tmp_path_factory) -> Path:
    from mlharness.tasks.librispeech.synth import write_synthetic_librispeech

    return write_synthetic_librispeech(tmp_path_factory.mktemp("librispeech") / "set", count=2, use_espeak=False)


def hostile_set(clean: Path, folder: Path, make_clip=None, edit_entry=None) -> tuple[Path, Path]:
    """A copy of the clean set whose entry 0 has its clip replaced by ``make_clip(path)`` and/or its JSON entry
    changed by ``edit_entry(entry)``; (the set, the clip's path)."""
    out = shutil.copytree(clean, folder / "set")
    records = json.loads((out / "dev-all-repack.json").read_text())
    clip = out / "dev-all-repack" / Path(records[0]["files"][0]["fname"]).name
    if make_clip is not None:
        clip.unlink()
        make_clip(clip)
    if edit_entry is not None:
        edit_entry(records[0])
    (out / "dev-all-repack.json").write_text(json.dumps(records))
    return out, clip


def sparse_ten_hours(p: Path) -> None:
    frames = 10 * 3600 * RATE
    with open(p, "wb") as f:
        f.write(wav_header(frames))
        f.truncate(44 + 2 * frames)  # a hole: no gigabytes written


def gigahertz_wav(p: Path) -> None:
    p.write_bytes(wav_header(RATE, rate=1_000_000_000) + bytes(2 * RATE))


def char_device(p: Path) -> None:
    os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # the /dev/zero numbers, made inside tmp_path


def set_duration(seconds: float):
    def edit(entry: dict) -> None:
        entry["files"][0]["duration"] = entry["original_duration"] = seconds
    return edit


def set_rate(entry: dict) -> None:
    entry["files"][0]["sample_rate"] = 1_000_000_000


CASES = {
    "sparse-10h-wav": (sparse_ten_hours, None, r"holds 36000.00 s \(576000000 samples at 16000 Hz\), more than the "
                                               r"600 s read for one clip"),
    "flac-2^36": (lambda p: p.write_bytes(flac_header((1 << 36) - 1)), None,
                  r"holds 4294967.30 s \(68719476735 samples at 16000 Hz\), more than the 600 s"),
    "rate-in-header": (gigahertz_wav, None, r"the sample rate in the header of audio file .* is 1000000000; a "
                                            r"sample rate is a whole number of Hz from 1000 to 384000"),
    "stated-length": (None, set_duration(29.5), r"holds [0-9.]+ s \([0-9]+ samples at 16000 Hz\), but its "
                                                r"dataset entry states 29.5 s"),
    "fifo": (os.mkfifo, None, r"audio file .* is a FIFO, not a regular file"),
    "char-device": (char_device, None, r"audio file .* is a character device, not a regular file"),
    "folder": (lambda p: p.mkdir(), None, r"audio file .* is a folder, not a regular file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_clip_is_refused_at_the_door_naming_the_file_and_entry(case, clean_set, tmp_path, run_cli):
    if case == "char-device" and os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    make_clip, edit_entry, message = CASES[case]
    data, clip = hostile_set(clean_set, tmp_path, make_clip, edit_entry)
    start = time.monotonic()
    proc = run_cli("run", "--manifest", "whisper-oracle", "--dataset-path", str(data), "--scenario", "Offline",
                   "--mode", "accuracy", "--count", "1", "--no-progress", "--output", str(tmp_path / "out"),
                   timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert "dev-all-repack.json: entry 0 (sample 0): " in proc.stderr and str(clip) in proc.stderr
    assert re.search(message, proc.stderr), proc.stderr
    assert time.monotonic() - start < 60
    assert not (tmp_path / "out").exists()


def test_a_sample_rate_out_of_range_in_the_dataset_json_names_the_entry(clean_set, tmp_path, run_cli):
    data, _ = hostile_set(clean_set, tmp_path, edit_entry=set_rate)
    proc = run_cli("run", "--manifest", "whisper-oracle", "--dataset-path", str(data), "--scenario", "Offline",
                   "--mode", "accuracy", "--count", "1", "--no-progress", "--output", str(tmp_path / "out"),
                   timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "dev-all-repack.json: entry 0: field 'files[].sample_rate' is 1000000000; a sample rate is" in proc.stderr


def test_library_readers_check_headers_before_samples(clean_set, tmp_path):
    from mlharness.tasks.librispeech.audio import audio_header, audio_input, load_audio
    from mlharness.tasks.librispeech.dataset import LibriSpeech

    clips = LibriSpeech(clean_set / "dev-all-repack.json")
    path = clips.audio_path(0)
    header = audio_header(path)
    assert header.rate == RATE and header.channels == 1 and header.seconds == pytest.approx(clips.records[0]["seconds"])
    # the stated length within its tolerance (0.5 s or 5 %) is accepted, beyond it refused
    assert load_audio(path, RATE, header.seconds + 0.4).size == header.frames
    with pytest.raises(DatasetError, match=r"but its dataset entry states"):
        load_audio(path, RATE, header.seconds + 0.6)
    sparse = tmp_path / "sparse.wav"
    sparse_ten_hours(sparse)
    with pytest.raises(DatasetError, match=r"sparse.wav holds 36000.00 s"):
        load_audio(sparse)
    ctx = {"inputs": [{"name": "audio", "type": "audio", "parameters": {"sample_rate": 1_000_000_000}}]}
    with pytest.raises(DatasetError, match=r"input 'audio' \(type: audio\): parameters.sample_rate is 1000000000"):
        audio_input(ctx, path)
    with pytest.raises(DatasetError, match=r"the sample rate to read audio file .* at is 0"):
        load_audio(path, 0)
    missing = tmp_path / "missing.wav"
    with pytest.raises(DatasetError, match=r"audio file .*missing.wav does not exist"):
        load_audio(missing)
    wave = load_audio(path, 8000)  # resampled within the bounds
    assert abs(wave.size - header.frames // 2) <= 1 and np.isfinite(wave).all()


def test_dataset_json_durations_must_be_numbers(clean_set, tmp_path):
    from mlharness.tasks.librispeech.dataset import LibriSpeech

    records = json.loads((clean_set / "dev-all-repack.json").read_text())
    records[1]["original_duration"] = "nan"
    (tmp_path / "d.json").write_text(json.dumps(records))
    with pytest.raises(DatasetError, match=r"d.json: entry 1: field 'original_duration' is 'nan'"):
        LibriSpeech(tmp_path / "d.json")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(DatasetError, match=r"fifo.json is a FIFO, not a regular file"):
        LibriSpeech(tmp_path / "fifo.json")
