"""Historical MLHarness/MLModelScope manifests: every field of MLModelScope's ModelManifest is recognised and
mapped, a mix of the two formats is refused, every schema problem is listed, both hook conventions reach
preprocess, archives are unpacked, and `manifest validate` catches model-level problems naming the field."""

from __future__ import annotations

import tarfile
import textwrap
from pathlib import Path

import pytest

from mlharness.errors import ManifestError
from mlharness.manifest.historical import AGENT_HOOKS
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import load_manifest
from mlharness.manifest.schema import HookRef
from mlharness.tasks.generic.models import write_classifier
from mlharness.tasks.generic.synth import write_colour_folder

FIXTURES = Path(__file__).parent / "fixtures" / "historical"

# every field of MLModelScope's ModelManifest, as its agents wrote them
FULL = """\
name: Every_Field
version: 2
description: every field of MLModelScope's ModelManifest
references:
  - https://example.org/paper.pdf
license: MIT
modality: image_classification
hidden: false
framework:
  name: Onnxruntime
  version: ">=1.0"
  container:
    amd64:
      cpu: raiproject/carml-onnxruntime:amd64-cpu
container:
  amd64:
    cpu: raiproject/carml-onnxruntime:amd64-cpu
inputs:
  - type: image
    description: the input image
    parameters:
      element_type: float32
      input_layer: data
      layout: HWC
      color_mode: BGR
      dimensions: [3, 8, 8]
      mean: [1, 2, 3]
      scale: 2
output:
  type: classification
  description: the scores
  parameters:
    element_type: float32
    output_layer: prob
    features_url: synset.txt
    features_checksum: 4d234b5833aca44928065a180db3016a
model:
  base_url: https://example.org/models
  graph_path: every.onnx
  weights_path: every.bin
  is_archive: false
  graph_checksum: a638cf028b5870da29e09ccc2f7182e7
  weights_checksum: e3faa3710ee19e81c8c1b07e04e2ed7f
  features_path: synset.txt
  features_checksum: 4d234b5833aca44928065a180db3016a
attributes:
  kind: CNN
  manifest_author: someone
before_preprocess: |
  def before_preprocess(ctx):
      return None
preprocess: |
  def preprocess(ctx, data):
      return data
after_preprocess: |
  def after_preprocess(ctx):
      pass
before_postprocess: |
  def before_postprocess(ctx):
      pass
postprocess: |
  def postprocess(ctx, data):
      return data[0]
after_postprocess: |
  def after_postprocess(ctx):
      pass
"""


def _write(tmp_path: Path, text: str, name: str = "m.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_field_of_the_mlmodelscope_manifest_is_mapped(tmp_path):
    loaded = load_manifest(_write(tmp_path, FULL))
    m = loaded.model
    assert m.version == "2" and m.license == "MIT" and m.modality == "image_classification"
    assert m.framework.name == "onnxruntime" and m.framework.version == ">=1.0"
    assert m.container == {"amd64": {"cpu": "raiproject/carml-onnxruntime:amd64-cpu"}}
    spec = m.inputs[0]
    assert (spec.name, spec.element_type, spec.layout, spec.shape) == ("data", "float32", "HWC", [8, 8, 3])
    assert spec.parameters["color_mode"] == "BGR" and spec.parameters["mean"] == [1, 2, 3]
    assert spec.parameters["scale"] == 2
    assert len(m.outputs) == 1 and m.outputs[0].name == "prob" and m.outputs[0].type == "classification"
    a = m.model
    assert (a.base_url, a.graph_path, a.weights_path, a.is_archive) == (
        "https://example.org/models", "every.onnx", "every.bin", False)
    assert a.graph_checksum == "a638cf028b5870da29e09ccc2f7182e7"
    assert a.weights_checksum == "e3faa3710ee19e81c8c1b07e04e2ed7f"
    assert (a.features_path, a.features_checksum) == ("synset.txt", "4d234b5833aca44928065a180db3016a")
    assert m.attributes == {"kind": "CNN", "manifest_author": "someone"}
    for key in ("before_preprocess", "preprocess", "after_preprocess", "before_postprocess", "postprocess",
                "after_postprocess"):
        assert isinstance(getattr(m, key), str) and f"def {key}(" in getattr(m, key)
    assert not loaded.fetch_all_outputs  # the output is named: fetched by its name
    note = loaded.notes[0]
    for mapped in ("version 2 (a number) as a string", "references", "hidden", "framework.container",
                   "container", "output as outputs[0]", "features_path", "(channels first) as the HWC shape"):
        assert mapped in note, mapped
    assert note.count("\n") == 0  # one line


def test_the_published_manifests_are_mapped(tmp_path):
    r50 = load_manifest(FIXTURES / "MLPerf_ResNet_50_v1.5.yml")
    m = r50.model
    assert m.name == "MLPerf_ResNet50_v1.5" and m.version == "1.0" and m.framework.version == "1.6.0"
    assert m.inputs[0].name is None  # input_layer: 0 is the graph's first input, by position
    assert m.inputs[0].shape == [3, 224, 224] and m.inputs[0].parameters["mean"] == [123.68, 116.78, 103.94]
    assert m.outputs[0].parameters["probabilities_layer"] == 1
    assert r50.fetch_all_outputs  # its postprocess reads data[1] of a graph with two outputs
    assert isinstance(m.preprocess, str) and "cv2.imread(data)" in m.preprocess
    r18 = load_manifest(FIXTURES / "TorchVision_ResNet_18.yml").model
    assert r18.inputs[0].parameters["scale"] == [58.395, 57.120, 57.375]
    assert r18.outputs[0].parameters["probabilities_transform"] == "softmax"
    # no hooks in the file: the agents' processing from the parameters
    assert r18.preprocess == HookRef(file=str(AGENT_HOOKS), function="preprocess")
    assert r18.postprocess == HookRef(file=str(AGENT_HOOKS), function="postprocess")
    dl = load_manifest(FIXTURES / "ResNet50_v1.5.yml").model
    assert dl.modality == "general" and dl.model.features_path.endswith("synset.txt")
    assert dl.model.graph_checksum == "a638cf028b5870da29e09ccc2f7182e7"


def test_a_mix_of_the_two_formats_is_refused(tmp_path):
    text = (FIXTURES / "MLPerf_ResNet_50_v1.5.yml").read_text() + "mlperf:\n  model: resnet50\n"
    with pytest.raises(ManifestError) as e:
        load_manifest(_write(tmp_path, text))
    msg = str(e.value)
    assert "mixes the two manifest formats" in msg and "'mlperf'" in msg and "references" in msg
    both = FULL.replace("output:\n", "outputs:\n  - type: x\noutput:\n", 1)
    with pytest.raises(ManifestError, match="outputs \\(beside output\\)"):
        load_manifest(_write(tmp_path, both, "both.yml"))


def test_unknown_keys_of_our_format_stay_errors(tmp_path):
    text = 'name: x\nversion: "1"\nframework: {name: echo}\ninputs: [{name: a}]\noutputs: [{name: b}]\nreferencez: []\n'
    with pytest.raises(ManifestError, match="field 'referencez': unknown key"):
        load_manifest(_write(tmp_path, text))


def test_every_problem_is_listed(tmp_path):
    text = textwrap.dedent("""\
        name: x
        framework: {name: echo, warmup: -1}
        inputs:
          - {name: a, element_type: float31}
          - {name: b, shape: [0]}
        outputs: [{name: c, element_type: nope}]
        batching: {max_batchsize: 0, Offline: 0}
        response: {element_type: bfloat16}
        """)
    with pytest.raises(ManifestError) as e:
        load_manifest(_write(tmp_path, text))
    msg = str(e.value)
    for field in ("framework.warmup", "inputs[0].element_type", "inputs[1].shape", "outputs[0].element_type",
                  "batching.max_batchsize", "batching.Offline", "response.element_type"):
        assert field in msg, field
    assert "more)" not in msg


def test_hook_conventions(tmp_path):
    """The built-in files dataset hands preprocess each sample's path; with a dataset manifest of its own, a
    historical manifest's preprocess gets the index as a string, one of spec v1 the int."""
    write_colour_folder(tmp_path / "imgs", 3)
    historical = load_manifest(FIXTURES / "MLPerf_ResNet_50_v1.5.yml", dataset="files")
    from mlharness.loadgen.qsl import sample_argument

    ctx = {"dataset_path": str(tmp_path / "imgs")}
    hooks = HookSet(historical, ctx)
    assert hooks.call("init", None) == 3
    assert [Path(sample_argument(hooks, i)).name for i in range(3)] == ["img_0000.png", "img_0001.png",
                                                                         "img_0002.png"]
    ds = FIXTURES / "imagenet_mlharness.yml"
    mlharness = HookSet(load_manifest(FIXTURES / "ResNet50_v1.5.yml", dataset=ds), ctx)
    assert sample_argument(mlharness, 2) == "2"
    ours = _write(tmp_path, 'name: o\nframework: {name: echo}\ninputs: [{name: a}]\noutputs: [{name: b}]\n'
                            'preprocess: |\n  def preprocess(ctx, i):\n      return i\n', "ours.yaml")
    assert sample_argument(HookSet(load_manifest(ours, dataset=ds), ctx), 2) == 2


def test_an_archive_is_unpacked(tmp_path, monkeypatch):
    """MLModelScope: with is_archive, base_url is the archive and graph_path the model inside it."""
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    model = write_classifier(tmp_path / "build" / "net.onnx", mean=[0, 0, 0], size=8, n_classes=1000)
    with tarfile.open(tmp_path / "net.tar.gz", "w:gz") as tar:
        tar.add(model, arcname="every.onnx")
    text = FULL.replace("  base_url: https://example.org/models\n", "  base_url: net.tar.gz\n").replace(
        "  is_archive: false\n", "  is_archive: true\n")
    loaded = load_manifest(_write(tmp_path, text))
    from mlharness.run.factory import resolve_model_file

    path = resolve_model_file(loaded)
    assert path.name == "every.onnx" and path.parent.name == "net.tar.gz.extracted"
    assert path.read_bytes() == model.read_bytes()
    assert "base_url as the archive" in loaded.notes[0]


# --- manifest validate: model-level problems, without running a hook ------------------------------------------

OURS = """\
name: checked
version: "1.0"
framework: {name: onnxruntime, version: "VERSION"}
inputs: [{name: INPUT, element_type: DTYPE, shape: SHAPE}]
outputs: [{name: ONAME, element_type: OTYPE, shape: ODIMS}]
model: {graph_path: net.onnx}
preprocess: |
  import HOOKIMPORT

  def preprocess(ctx, index):
      return None
"""
GOOD = {"VERSION": ">=1.0", "INPUT": "input", "DTYPE": "float32", "SHAPE": "[3, 8, 8]", "HOOKIMPORT": "numpy",
        "ONAME": "output", "OTYPE": "float32", "ODIMS": "[1000]"}


def _validate(run_cli, tmp_path, corrupt=False, **change):
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    if corrupt:
        (folder / "net.onnx").write_bytes(b"\x08\x07this is not an onnx graph" * 10)
    else:
        write_classifier(folder / "net.onnx", mean=[0, 0, 0], size=8, n_classes=1000)
    text = OURS
    for key, value in {**GOOD, **change}.items():
        text = text.replace(key, value)
    (folder / "m.yaml").write_text(text)
    return run_cli("manifest", "validate", str(folder / "m.yaml"))


def test_validate_accepts_a_model_that_agrees(run_cli, tmp_path):
    proc = _validate(run_cli, tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "1 input(s) and 1 output(s) agree" in proc.stdout


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"INPUT": "image"}, "inputs[0].name", "'image' is not one of the inputs"),
    ({"DTYPE": "int64"}, "inputs[0].element_type", "declares int64"),
    ({"SHAPE": "[3, 16, 16]"}, "inputs[0].shape", "declares [3, 16, 16]"),
    ({"ONAME": "logits"}, "outputs[0].name", "'logits' is not one of the outputs"),
    ({"OTYPE": "int64"}, "outputs[0].element_type", "declares int64"),
    ({"ODIMS": "[10]"}, "outputs[0].shape", "declares [10] per sample"),
    ({"VERSION": ">=99"}, "framework.version", "is not met by the installed onnxruntime"),
    ({"HOOKIMPORT": "no_such_helper_module"}, "preprocess", "imports module 'no_such_helper_module'"),
])
def test_validate_names_the_field(run_cli, tmp_path, change, field, words):
    proc = _validate(run_cli, tmp_path, **change)
    assert proc.returncode == 2, proc.stdout
    assert f"field '{field}'" in proc.stderr and words in proc.stderr, proc.stderr
    assert "m.yaml" in proc.stderr


def test_validate_refuses_a_corrupt_model(run_cli, tmp_path):
    proc = _validate(run_cli, tmp_path, corrupt=True)
    assert proc.returncode == 2
    assert "field 'model.graph_path'" in proc.stderr and "onnxruntime cannot load" in proc.stderr


def test_a_manifest_folder_is_importable(run_cli, tmp_path):
    """A factory module and a hook helper beside the manifest import without PYTHONPATH; a missing one is named."""
    folder = tmp_path / "pt"
    folder.mkdir()
    (folder / "mymodels.py").write_text("def build():\n    raise RuntimeError('validate must not build it')\n")
    (folder / "myhelpers.py").write_text("SCALE = 2\n")
    text = textwrap.dedent("""\
        name: pt
        framework: {name: pytorch}
        inputs: [{name: x, shape: [4]}]
        outputs: [{name: y}]
        model: {factory: FACTORY}
        preprocess: |
          import myhelpers

          def preprocess(ctx, index):
              return None
        """)
    (folder / "m.yaml").write_text(text.replace("FACTORY", "mymodels:build"))
    proc = run_cli("manifest", "validate", str(folder / "m.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (folder / "m.yaml").write_text(text.replace("FACTORY", "nomodels:build"))
    proc = run_cli("manifest", "validate", str(folder / "m.yaml"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "field 'model.factory'" in proc.stderr and "cannot import module 'nomodels'" in proc.stderr
    assert str(folder / "m.yaml") in proc.stderr


@pytest.mark.slow
def test_validate_loads_pytorch_model_files(run_cli, tmp_path):
    """A torch.export program is loaded by the PyTorch predictor: a wrong per-sample shape names the field; a
    file that is not a model names model.graph_path."""
    import torch

    class Net(torch.nn.Module):
        def forward(self, x):
            return x.mean(dim=1)

    folder = tmp_path / "pt"
    folder.mkdir()
    program = torch.export.export(Net(), (torch.zeros(2, 4),), dynamic_shapes=({0: torch.export.Dim("b")},))
    torch.export.save(program, str(folder / "net.pt2"))
    (folder / "junk.pt").write_bytes(b"not a torchscript archive")
    text = textwrap.dedent("""\
        name: pt
        framework: {name: pytorch}
        inputs: [{name: x, shape: SHAPE}]
        outputs: [{name: y}]
        model: {graph_path: FILE}
        """)
    (folder / "m.yaml").write_text(text.replace("SHAPE", "[4]").replace("FILE", "net.pt2"))
    proc = run_cli("manifest", "validate", str(folder / "m.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "loads in pytorch" in proc.stdout
    (folder / "m.yaml").write_text(text.replace("SHAPE", "[5]").replace("FILE", "net.pt2"))
    proc = run_cli("manifest", "validate", str(folder / "m.yaml"))
    assert proc.returncode == 2 and "field 'inputs[0].shape'" in proc.stderr, proc.stderr
    (folder / "m.yaml").write_text(text.replace("SHAPE", "[4]").replace("FILE", "junk.pt"))
    proc = run_cli("manifest", "validate", str(folder / "m.yaml"))
    assert proc.returncode == 2 and "field 'model.graph_path'" in proc.stderr, proc.stderr


def test_the_tensorflow_agent_manifest_is_mapped():
    """c3sr/tensorflow's ResNet_v1_50.yml: a float framework version, channels-first dimensions with an HWC
    layout, and the probabilities output named by probabilities_layer."""
    loaded = load_manifest(FIXTURES / "TensorFlow_ResNet_v1_50.yml")
    m = loaded.model
    assert m.framework.name == "tensorflow" and m.framework.version == "1.14"
    assert m.inputs[0].name == "input" and m.inputs[0].layout == "HWC" and m.inputs[0].shape == [224, 224, 3]
    assert m.outputs[0].name == "resnet_v1_50/predictions/Reshape_1"
    assert not loaded.fetch_all_outputs  # a frozen graph is fetched by name
    assert (m.model.base_url, m.model.graph_path) == ("http://s3.amazonaws.com/store.carml.org/models/tensorflow/"
                                                      "graphs/", "resnet_v1_50_frozen.pb")
    assert m.attributes["top1"] == 75.2
    assert "as the HWC shape [224, 224, 3]" in loaded.notes[0]


def test_a_hook_imports_a_module_beside_the_manifest_in_a_run(run_cli, tmp_path):
    folder = tmp_path / "echo"
    folder.mkdir()
    (folder / "myhelpers.py").write_text("import numpy as np\n\ndef sample(i):\n    return np.array([3 * i], np.int64)\n")
    (folder / "m.yaml").write_text(textwrap.dedent("""\
        name: echo_helpers
        framework: {name: echo}
        inputs: [{name: x, element_type: int64, shape: [1]}]
        outputs: [{name: y, element_type: int64}]
        response: {element_type: int64}
        preprocess: |
          import myhelpers

          def preprocess(ctx, index):
              return myhelpers.sample(index)
        """))
    out = tmp_path / "out"
    proc = run_cli("run", "--manifest", str(folder / "m.yaml"), "--scenario", "Offline", "--mode", "accuracy",
                   "--count", "4", "--output", str(out), "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    import numpy as np

    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert {e["qsl_idx"]: int(np.frombuffer(bytes.fromhex(e["data"]), np.int64)[0]) for e in entries} == {
        0: 0, 1: 3, 2: 6, 3: 9}
