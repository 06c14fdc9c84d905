"""Audio inputs plug any model in through a manifest alone: a PyTorch tone classifier (no MLPerf benchmark) on a
folder of sound files at 8, 16, 22.05 and 44.1 kHz, mono and stereo, WAV, FLAC and OGG, read and resampled to
the manifest's declared 16 kHz by its preprocess hook, in a real Offline run scored top-1 against labels.txt.
Its model places each tone by the frequency of its loudest FFT bin assuming 16 kHz, so two of the four clips are
misclassified unless they were resampled."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

soundfile = pytest.importorskip("soundfile")
pytest.importorskip("soxr")
pytest.importorskip("torch")

MODEL = '''
import torch


class ToneClassifier(torch.nn.Module):
    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        spectrum = torch.fft.rfft(wave, dim=-1).abs()
        hz = torch.fft.rfftfreq(wave.shape[-1], d=1.0 / 16000)
        return torch.stack([(spectrum * (hz < 1000)).amax(dim=-1), (spectrum * (hz >= 1000)).amax(dim=-1)], dim=-1)


def build() -> torch.nn.Module:
    return ToneClassifier()
'''

MANIFEST = '''
name: tone-keywords
version: "1.0"
framework: {name: pytorch, version: "*"}
modality: audio_classification
inputs:
  - {name: waveform, type: audio, element_type: float32, shape: [-1], parameters: {sample_rate: 16000}}
outputs:
  - {name: scores, type: probability, element_type: float32, shape: [2]}
model:
  factory: tone_model:build
dataset: files
batching: {max_batchsize: 1}
preprocess: |
  from mlharness.tasks.librispeech.audio import audio_input

  def preprocess(ctx, path):
      return audio_input(ctx, path)
'''

# (file, tone Hz, file rate, channels, label: 0 under 1 kHz, 1 above)
CLIPS = [("a_low_8k.wav", 700, 8000, 1, 0), ("b_high_44k.flac", 1500, 44100, 2, 1),
         ("c_low_16k.wav", 400, 16000, 1, 0), ("d_high_22k.ogg", 3000, 22050, 1, 1)]


def test_a_speech_model_plugs_in_through_a_manifest_alone(run_cli, tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    for name, hz, rate, channels, _ in CLIPS:
        wave = 0.4 * np.sin(2 * np.pi * hz * np.arange(rate // 2) / rate)
        soundfile.write(str(clips / name), np.stack([wave, wave], 1) if channels == 2 else wave, rate)
    (clips / "labels.txt").write_text("".join(f"{name} {label}\n" for name, *_, label in CLIPS))
    (tmp_path / "tone_model.py").write_text(textwrap.dedent(MODEL))
    (tmp_path / "tone-keywords.yaml").write_text(MANIFEST)
    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", str(tmp_path / "tone-keywords.yaml"), "--dataset-path", str(clips),
                   "--scenario", "Offline", "--mode", "accuracy", "--output", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "accuracy.txt").read_text().startswith("accuracy=100.000%, good=4, total=4")
