"""A speech-to-text model that is not whisper plugs in through a manifest alone: a tiny CTC acoustic model (PyTorch
factory, seeded weights) on the synthetic LibriSpeech set, its postprocess hook decoding greedily (argmax, repeats
collapsed, blanks dropped) into the 42 labels of ``accuracy_eval.py``, answered as variable-length int64 responses
and scored with the whisper WER. The test decodes the accuracy log itself, compares it with the same model run in
this process, and recomputes the WER independently. A second "model" maps each clip's audio to per-frame one-hot
logits spelling its reference transcript, so the same manifest path must score exactly 100%."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("soundfile")
pytest.importorskip("soxr")
pytest.importorskip("whisper_normalizer")

COUNT = 4
BLANK = 42  # the CTC blank: one class past the 42 labels

MODEL = '''
import hashlib
import json

import numpy as np
import torch

CLASSES = 43  # accuracy_eval.py's 42 labels, then the CTC blank
BLANK = 42
HOP = 800  # 50 ms frames at 16 kHz


class TinyCTC(torch.nn.Module):
    """Framing of the waveform by a strided convolution, a second convolution over frames, a linear classifier."""

    def __init__(self):
        super().__init__()
        self.frames = torch.nn.Conv1d(1, 24, kernel_size=2 * HOP, stride=HOP)
        self.context = torch.nn.Conv1d(24, 32, kernel_size=3, padding=1)
        self.classify = torch.nn.Linear(32, CLASSES)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:  # (batch, samples) -> (batch, frames, classes)
        x = torch.relu(self.frames(wave.unsqueeze(1) * 8.0))
        x = torch.relu(self.context(x))
        return self.classify(x.transpose(1, 2))


def build(seed: int = 0, blank_bias: float = 0.0) -> torch.nn.Module:
    """Seeded random weights; ``blank_bias`` raises the blank's logit, as a trained CTC model emits blank on
    most frames."""
    torch.manual_seed(seed)
    model = TinyCTC()
    with torch.no_grad():
        model.classify.bias[BLANK] += blank_bias
    return model


def clip_key(wave: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(wave, dtype=np.float32).tobytes()).hexdigest()


class SpellingCTC(torch.nn.Module):
    """Per-frame one-hot logits spelling each clip's label sequence, looked up by the clip's samples: every
    label over two frames, a blank between two equal labels, blanks at both ends."""

    def __init__(self, table: str):
        super().__init__()
        with open(table, encoding="utf-8") as f:
            self.table = json.load(f)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        rows = []
        for clip in wave:
            key = clip_key(clip.cpu().numpy())
            if key not in self.table:
                raise KeyError(f"clip {key[:12]} is not in the spelling table")
            frames, prev = [BLANK], None
            for label in self.table[key]:
                frames += ([BLANK] if label == prev else []) + [label, label]
                prev = label
            frames.append(BLANK)
            logits = torch.full((len(frames), CLASSES), -4.0)
            logits[torch.arange(len(frames)), torch.tensor(frames)] = 4.0
            rows.append(logits)
        return torch.stack(rows)  # batches of one clip (max_batchsize 1)


def spelling(table: str) -> torch.nn.Module:
    return SpellingCTC(table)
'''

MANIFEST = '''
name: {name}
version: "1.0"
framework:
  name: pytorch
  version: "*"
  options: {{factory_args: {factory_args}}}
modality: speech_to_text
inputs:
  - {{name: waveform, type: audio, element_type: float32, shape: [-1], parameters: {{sample_rate: 16000}}}}
outputs:
  - {{name: logits, type: tensor, element_type: float32, shape: [-1, 43]}}
model:
  factory: {factory}
dataset: librispeech
response:
  element_type: int64     # label indices, as accuracy_eval.py reads them by default
accuracy:
  metric: whisper_wer
  options: {{manifest_file: dev-all-repack.json, dtype: int64}}
batching:
  max_batchsize: 1
preprocess: |
  from mlharness.tasks.librispeech.audio import audio_input

  def preprocess(ctx, index):
      return audio_input(ctx, LIBRI.audio_path(index))   # float32 at the declared 16 kHz
postprocess: |
  import numpy as np

  BLANK = 42

  def postprocess(ctx, outputs):
      answers = []
      for logits in outputs[0]:                     # (frames, 43) per clip
          best = np.argmax(logits, axis=-1)
          keep = np.ones(best.shape, dtype=bool)
          keep[1:] = best[1:] != best[:-1]          # collapse repeats
          answers.append(best[keep & (best != BLANK)].astype(np.int64))
      return answers                                # one variable-length int64 response per clip
'''

LINE = re.compile(r"Word Error Rate: ([0-9.e+-]+)%, accuracy=([0-9.e+-]+)%\n")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    from mlharness.tasks.librispeech.synth import write_synthetic_librispeech

    return write_synthetic_librispeech(tmp_path_factory.mktemp("librispeech") / "set", count=COUNT, seed=3,
                                       use_espeak=False)


def _write(folder: Path, name: str, factory: str, factory_args: dict) -> Path:
    (folder / "ctc_model.py").write_text(textwrap.dedent(MODEL))
    path = folder / f"{name}.yaml"
    path.write_text(MANIFEST.format(name=name, factory=factory, factory_args=json.dumps(factory_args)))
    return path


def _run(run_cli, manifest: Path, clips: Path, out: Path) -> str:
    proc = run_cli("run", "--manifest", str(manifest), "--dataset-path", str(clips), "--scenario", "Offline",
                   "--mode", "accuracy", "--count", str(COUNT), "--output", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (out / "accuracy.txt").read_text()


def _logged_transcripts(out: Path) -> dict[int, str]:
    """The accuracy log decoded here: each response's bytes as little-endian int64 indices into the labels."""
    from mlharness.tasks.librispeech.dataset import LABELS

    texts = {}
    for entry in json.loads((out / "mlperf_log_accuracy.json").read_text()):
        ids = np.frombuffer(bytes.fromhex(entry["data"]), dtype="<i8")
        assert ids.size and ids.min() >= 0 and ids.max() < len(LABELS)
        texts[entry["qsl_idx"]] = "".join(LABELS[i] for i in ids)
    return texts


def _greedy_ctc(logits: np.ndarray) -> list[int]:
    labels, prev = [], None
    for k in logits.argmax(axis=-1).tolist():
        if k != prev and k != BLANK:
            labels.append(k)
        prev = k
    return labels


def _edit_distance(a: list[str], b: list[str]) -> int:
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[-1][-1]


def _model_module(folder: Path):
    spec = importlib.util.spec_from_file_location("ctc_model_under_test", folder / "ctc_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_ctc_model_is_scored_with_the_whisper_wer(run_cli, tmp_path, clips):
    from mlharness.tasks.librispeech.audio import load_audio
    from mlharness.tasks.librispeech.dataset import LABELS, LibriSpeech
    from mlharness.tasks.librispeech.metric import normalizer

    manifest = _write(tmp_path, "tiny-ctc", "ctc_model:build", {"seed": 0, "blank_bias": 0.5})
    text = _run(run_cli, manifest, clips, tmp_path / "run")
    assert LINE.fullmatch(text), text  # the official line (a random model's WER is over 100%)

    # the same model and decoding in this process give the transcripts the log holds
    data = LibriSpeech(clips / "dev-all-repack.json")
    model = _model_module(tmp_path).build(seed=0, blank_bias=0.5).eval()
    expected, paths = {}, []
    with torch.inference_mode():
        for i in range(COUNT):
            wave = torch.from_numpy(load_audio(data.audio_path(i), 16000))[None]
            logits = model(wave)[0].numpy()
            paths.append(logits.argmax(axis=-1))
            expected[i] = "".join(LABELS[k] for k in _greedy_ctc(logits))
    logged = _logged_transcripts(tmp_path / "run")
    assert logged == expected
    # the decoding had work to do (repeated frames, blanks) and the responses differ in length
    path = np.concatenate(paths)
    assert (path == BLANK).any() and (path[1:] == path[:-1]).any()
    assert len({len(t) for t in logged.values()}) > 1

    # the WER recomputed: whisper's normaliser, words split on white space, word-level edit distance (no word of
    # these hypotheses runs several reference words together, so the metric's concatenation rule does not apply)
    norm = normalizer()
    errors = words = 0
    for i, hyp in logged.items():
        ref = norm(data.reference(i)).split()
        errors += _edit_distance(norm(hyp).split(), ref)
        words += len(ref)
    wer = errors / words
    assert 0 < wer and text == f"Word Error Rate: {wer * 100}%, accuracy={(1 - wer) * 100}%\n"


def test_a_ctc_model_spelling_the_references_scores_100(run_cli, tmp_path, clips):
    from mlharness.tasks.librispeech.audio import load_audio
    from mlharness.tasks.librispeech.dataset import LibriSpeech

    data = LibriSpeech(clips / "dev-all-repack.json")
    table = {hashlib.sha256(load_audio(data.audio_path(i), 16000).tobytes()).hexdigest(): data.labels(i)
             for i in range(len(data))}
    assert len(table) == len(data)
    (tmp_path / "table.json").write_text(json.dumps(table))
    manifest = _write(tmp_path, "spelling-ctc", "ctc_model:spelling", {"table": str(tmp_path / "table.json")})
    text = _run(run_cli, manifest, clips, tmp_path / "run")
    assert text == "Word Error Rate: 0.0%, accuracy=100.0%\n"
    logged = _logged_transcripts(tmp_path / "run")
    assert logged == {i: data.reference(i) for i in range(COUNT)}
    # the references repeat letters ("ll", "ee"), which only the blanks between them keep apart
    assert any(re.search(r"([a-z])\1", data.reference(i)) for i in range(COUNT))
