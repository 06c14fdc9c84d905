"""Manifests written the MLHarness / MLModelScope way run unchanged; responses reach LoadGen byte for byte;
hooks are compiled exactly once per run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mlharness.tasks.demo.dataset import ensure_demo_dataset
from mlharness.tasks.demo.models import ensure_demo_model

pytestmark = pytest.mark.slow

DATASET_MANIFEST = """\
name: colour_patches
version: "1.0"
description: an ImageNet-layout folder read with plain Python, MLHarness style
init: |
  import os

  def init(count):
      global ROOT, NAMES, LABELS
      ROOT = ctx["dataset_path"]
      NAMES, LABELS = [], []
      with open(os.path.join(ROOT, "val_map.txt")) as f:
          for line in f:
              name, label = line.split()
              NAMES.append(name)
              LABELS.append(int(label))
      return len(NAMES)
load: |
  from PIL import Image

  DATA = {}

  def load(sample_list):
      for i in sample_list:
          with Image.open(os.path.join(ROOT, NAMES[i])) as im:
              DATA[i] = im.convert("RGB").copy()
unload: |
  def unload(sample_list):
      for i in sample_list:
          DATA.pop(i, None)
"""

MODEL_MANIFEST = """\
name: colour_oracle_mlharness
version: "1.0"
description: the demo oracle, written as an MLModelScope-style manifest
framework:
  name: onnxruntime
  version: "1.7.1"
modality: image_classification
inputs:
  - type: image
    description: the input image
    parameters:
      element_type: {value: float32}
      input_layer: image
      layout: CHW
      color_mode: RGB
      dimensions: [3, 32, 32]
      mean: [127.5, 127.5, 127.5]
      scale: [255, 255, 255]
outputs:
  - type: probability
    description: the output label
    parameters:
      element_type: int64
      output_layer: label
model:
  graph_path: oracle.onnx
  is_archive: false
dataset: colour_patches.yaml
accuracy:
  metric: imagenet_top1
attributes:
  marker_dir: MARKER_DIR
before_preprocess: |
  def before_preprocess(ctx):
      open(ctx["attributes"]["marker_dir"] + "/before_preprocess", "a").write("x")
      return 24
preprocess: |
  import numpy as np

  def preprocess(ctx, data):
      p = ctx["inputs"][0]["parameters"]
      img = np.asarray(DATA[data], dtype=np.float32)
      img = (img - np.array(p["mean"], np.float32)) / np.array(p["scale"], np.float32)
      return img.transpose(2, 0, 1)
after_preprocess: |
  def after_preprocess(ctx):
      open(ctx["attributes"]["marker_dir"] + "/after_preprocess", "a").write("x")
before_postprocess: |
  def before_postprocess(ctx):
      global POST_CALLS
      POST_CALLS = 0
      open(ctx["attributes"]["marker_dir"] + "/before_postprocess", "a").write("x")
postprocess: |
  import json

  def postprocess(ctx, data):
      global POST_CALLS
      POST_CALLS += 1
      return [json.dumps([float(label)]) for label in data[0]]
after_postprocess: |
  def after_postprocess(ctx):
      open(ctx["attributes"]["marker_dir"] + "/after_postprocess", "a").write(str(POST_CALLS))
"""


def test_mlharness_style_manifest_runs_unchanged(run_cli, tmp_path):
    images = ensure_demo_dataset(tmp_path / "images", count=32)
    ensure_demo_model(tmp_path / "oracle.onnx")
    markers = tmp_path / "markers"
    markers.mkdir()
    (tmp_path / "colour_patches.yaml").write_text(DATASET_MANIFEST)
    manifest = tmp_path / "oracle.yaml"
    manifest.write_text(MODEL_MANIFEST.replace("MARKER_DIR", str(markers)))
    out = tmp_path / "out"
    proc = run_cli("run", "--manifest", str(manifest), "--dataset-path", str(images), "--scenario", "Offline",
                   "--mode", "accuracy", "--max-batchsize", "5", "--output", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    # before_preprocess returned 24: the sample count; every sample is right when the hooks ran as written
    assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=24, total=24\n"
    # each once-hook ran exactly once; postprocess ran once per batch of 5 (24 samples -> 5 batches)
    assert (markers / "before_preprocess").read_text() == "x"
    assert (markers / "before_postprocess").read_text() == "x"
    assert (markers / "after_preprocess").read_text() == "x"
    assert (markers / "after_postprocess").read_text() == "5"


ECHO_MANIFEST = """\
name: echo_bytes
framework: {name: echo}
inputs: [{name: x, element_type: int64, shape: [1]}]
outputs: [{name: y, element_type: int64, shape: [1]}]
response: {element_type: bytes}
attributes: {counter: COUNTER}
dataset:
  name: indices
  init: |
    def init(count):
        return 40
preprocess: |
  import numpy as np
  # module-level code runs when the hook is compiled: count compilations
  with open(ctx["attributes"]["counter"], "a") as f:
      f.write("compiled\\n")

  def preprocess(ctx, index):
      return np.array([index], dtype=np.int64)
postprocess: |
  def postprocess(ctx, outputs):
      # responses of different lengths, derived from the sample index the model echoed back
      return [(b"sample-%d;" % i) * (1 + i % 3) for i in outputs[0][:, 0]]
"""


def _expected(i: int) -> bytes:
    return (b"sample-%d;" % i) * (1 + i % 3)


@pytest.mark.parametrize("scenario", ["Offline", "Server", "SingleStream", "MultiStream"])
def test_accuracy_log_holds_exact_postprocess_bytes(run_cli, tmp_path, scenario):
    counter = tmp_path / "compiles.txt"
    manifest = tmp_path / "echo.yaml"
    manifest.write_text(ECHO_MANIFEST.replace("COUNTER", str(counter)))
    out = tmp_path / "out"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", scenario, "--mode", "accuracy",
                   "--max-batchsize", "3", "--output", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    by_index: dict[int, list[str]] = {}
    for e in entries:
        by_index.setdefault(e["qsl_idx"], []).append(e["data"])
    assert sorted(by_index) == list(range(40))
    for i, datas in by_index.items():
        for data in datas:
            assert data == _expected(i).hex().upper(), (i, data)
    # preprocess ran for 40 samples, postprocess for many batches, yet the hook source was compiled once
    assert counter.read_text() == "compiled\n"


def test_hook_file_reference(run_cli, tmp_path):
    """Hooks may live in a Python file beside the manifest instead of inline source."""
    (tmp_path / "hooks.py").write_text(textwrap.dedent("""\
        import numpy as np

        def prep(ctx, index):
            return np.array([index], dtype=np.int64)

        def post(ctx, outputs):
            return outputs[0].astype(np.float32) * 2
    """))
    manifest = tmp_path / "m.yaml"
    manifest.write_text(textwrap.dedent("""\
        name: file_hooks
        framework: {name: echo}
        inputs: [{name: x, element_type: int64, shape: [1]}]
        outputs: [{name: y, element_type: int64, shape: [1]}]
        dataset: {name: d, init: "def init(count):\\n    return 8\\n"}
        preprocess: {file: hooks.py, function: prep}
        postprocess: {file: hooks.py, function: post}
    """))
    out = tmp_path / "out"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--output",
                   str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    import numpy as np

    for e in json.loads((out / "mlperf_log_accuracy.json").read_text()):
        assert np.frombuffer(bytes.fromhex(e["data"]), np.float32).tolist() == [2.0 * e["qsl_idx"]]


def test_dataset_hooks_see_model_globals_and_ctx(tmp_path, monkeypatch):
    """One namespace: a global set by the dataset's load is visible to the model's preprocess."""
    from mlharness.manifest.hooks import HookSet
    from mlharness.manifest.loader import load_manifest

    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    manifest = tmp_path / "echo.yaml"
    manifest.write_text(ECHO_MANIFEST.replace("COUNTER", str(tmp_path / "c.txt")).replace(
        "        return 40", "        global SEEN\n        SEEN = ctx['scenario']\n        return 40"))
    loaded = load_manifest(manifest)
    hooks = HookSet(loaded, {"scenario": "Offline", "attributes": {"counter": str(tmp_path / "c.txt")}})
    assert hooks.call("init", None) == 40
    assert hooks.namespace["SEEN"] == "Offline"
    assert Path(hooks.functions["preprocess"].__code__.co_filename).name.endswith("::preprocess")


def test_predict_hook_replaces_the_plain_predictor_call(run_cli, tmp_path):
    """The ``predict(ctx, run, inputs)`` extension may call the model several times per batch."""
    import numpy as np

    manifest = tmp_path / "m.yaml"
    manifest.write_text(textwrap.dedent("""\
        name: predict_hook
        framework: {name: echo}
        inputs: [{name: x, element_type: float32, shape: [1]}]
        outputs: [{name: y, element_type: float32, shape: [1]}]
        dataset: {name: d, init: "def init(count):\\n    return 10\\n"}
        preprocess: |
          import numpy as np
          def preprocess(ctx, index):
              return np.array([index], dtype=np.float32)
        predict: |
          def predict(ctx, run, inputs):
              a = run(inputs)[0]
              b = run([inputs[0] + 1])[0]
              return [a + b]
    """))
    out = tmp_path / "out"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--output",
                   str(out), "--max-batchsize", "4", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert len(entries) == 10
    for e in entries:
        assert np.frombuffer(bytes.fromhex(e["data"]), np.float32).tolist() == [2.0 * e["qsl_idx"] + 1]
