"""The real MLPerf manifests in every framework the reference provides: every manifest and framework variant loads
and validates; the ResNet50 factory is torchvision's network (same keys, same parameters, the same answers as the
ONNX ResNet50 built from its weights); the BERT factory loads a checkpoint in the reference's layout; the 3D U-Net
TorchScript file type loads. No network: the weights are generated."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlharness.manifest.hooks import check_hooks
from mlharness.manifest.loader import load_manifest
from mlharness.paths import MANIFESTS_DIR
from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig

torch = pytest.importorskip("torch")

MANIFESTS = sorted(p for p in MANIFESTS_DIR.rglob("*.yaml") if "datasets" not in p.parts)

# What each real manifest must offer, with the reference's files (URL, md5 from mlcommons/cm4mlops).
REAL_VARIANTS = {
    "resnet50": {
        "onnxruntime": ("https://zenodo.org/record/2592612/files/resnet50_v1.onnx", "a638cf028b5870da29e09ccc2f7182e7"),
        "tensorflow": ("https://zenodo.org/record/2535873/files/resnet50_v1.pb", "7b94a2da05dd30f6c0af23a46bc08886"),
        "pytorch": ("https://zenodo.org/record/4588417/files/resnet50-19c8e357.pth",
                    "9e9c86b324d80e65229fab49b8d9a8e8"),
    },
    "bert": {
        "onnxruntime": ("https://zenodo.org/record/3733910/files/model.onnx", "819b25b19cd8e59080c10892689750ca"),
        "pytorch": ("https://zenodo.org/record/3733896/files/model.pytorch", "00fbcbfaebfa20d87ac9885120a6e9b4"),
    },
    "3d-unet": {
        "onnxruntime": ("https://zenodo.org/record/5597155/files/3dunet_kits19_128x128x128_dynbatch.onnx?download=1",
                        "82f0618fde78f9839e7c712274019b4a"),
        "pytorch": ("https://zenodo.org/record/5597155/files/3dunet_kits19_pytorch.ptc?download=1",
                    "2251109371f408c9f10a4320ffdcaef8"),
        "tensorflow": ("https://zenodo.org/record/5597155/files/3dunet_kits19_128x128x128.tf.zip?download=1",
                       "9497108bd0504ae8f85a764a807b76a9"),
    },
}


def _variants() -> list[tuple[Path, str | None]]:
    import yaml

    cases: list[tuple[Path, str | None]] = []
    for path in MANIFESTS:
        data = yaml.safe_load(path.read_text())
        cases += [(path, None)] + [(path, fw) for fw in (data.get("frameworks") or {})]
    return cases


@pytest.mark.parametrize("path,framework", _variants(), ids=lambda v: v.stem if isinstance(v, Path) else str(v))
def test_every_manifest_and_variant_validates(path: Path, framework: str | None) -> None:
    loaded = load_manifest(path, framework=framework)
    assert loaded.model.framework.name == (framework or loaded.model.framework.name)
    assert "preprocess" in check_hooks(loaded)


@pytest.mark.parametrize("name,framework", [(n, fw) for n, v in REAL_VARIANTS.items() for fw in v])
def test_real_variants_download_the_reference_files(name: str, framework: str) -> None:
    m = load_manifest(name, framework=framework).model
    asset = m.model
    url, md5 = REAL_VARIANTS[name][framework]
    if asset.factory:  # pytorch state dict: the architecture comes from the factory
        assert (asset.weights_path, asset.weights_checksum, asset.graph_path) == (url, f"md5:{md5}", None)
        assert importlib.import_module(asset.factory.partition(":")[0])  # the factory's module imports
    else:
        assert (asset.graph_path, asset.graph_checksum) == (url, f"md5:{md5}")
    # the source of the URL and checksum is written down beside them
    assert "cm4mlops" in (MANIFESTS_DIR / name / f"{name}.yaml").read_text()


def test_resnet50_variants_keep_the_reference_preprocessing() -> None:
    tf = load_manifest("resnet50@tensorflow").model
    spec = tf.inputs[0]
    assert (spec.name, spec.layout, spec.shape, spec.parameters["pipeline"]) == ("input_tensor:0", "HWC",
                                                                                 [224, 224, 3], "onnx_tf")
    assert [o.name for o in tf.outputs] == ["ArgMax:0", "softmax_tensor:0"]
    assert tf.attributes["label_offset"] == -1  # 1001 classes like the ONNX model
    pt, ref = load_manifest("resnet50@pytorch").model, load_manifest("resnet50-1000").model
    assert pt.inputs[0].model_dump() == ref.inputs[0].model_dump()  # torchvision pipeline, CHW
    assert pt.attributes["label_offset"] == ref.attributes["label_offset"] == 0


# ---------------------------------------------------------------------------------------------- ResNet50 (pytorch)


def _factory(ref: str) -> tuple[Any, dict[str, Any]]:
    """The manifest variant's factory function and its factory_args."""
    m = load_manifest(ref).model
    module, _, fn = m.model.factory.partition(":")
    return getattr(importlib.import_module(module), fn), dict(m.framework.options.get("factory_args", {}))


def _torchvision_keys() -> set[str]:
    """torchvision resnet50's state-dict keys, written from the architecture's rules (3, 4, 6, 3 bottlenecks;
    three conv+bn pairs each; a conv+bn shortcut 'downsample' in each stage's first block)."""
    bn = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    keys = {"conv1.weight", "fc.weight", "fc.bias"} | {f"bn1.{s}" for s in bn}
    for stage, blocks in enumerate((3, 4, 6, 3), start=1):
        for b in range(blocks):
            p = f"layer{stage}.{b}"
            for i in (1, 2, 3):
                keys |= {f"{p}.conv{i}.weight"} | {f"{p}.bn{i}.{s}" for s in bn}
            if b == 0:
                keys |= {f"{p}.downsample.0.weight"} | {f"{p}.downsample.1.{s}" for s in bn}
    return keys


def test_resnet50_factory_is_torchvision_resnet50() -> None:
    factory, args = _factory("resnet50@pytorch")
    model = factory(**args)
    state = model.state_dict()
    assert set(state) == _torchvision_keys() and len(state) == 320
    per_layer = {f"layer{i}": sum(k.startswith(f"layer{i}.") for k in state) for i in range(1, 5)}
    assert per_layer == {"layer1": 60, "layer2": 78, "layer3": 114, "layer4": 60}
    for key in ("layer4.2.bn3.running_var", "fc.weight", "layer1.0.downsample.1.num_batches_tracked",
                "layer3.5.conv2.weight"):
        assert key in state
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    assert tuple(state["fc.weight"].shape) == (1000, 2048)
    assert tuple(state["layer4.2.conv3.weight"].shape) == (2048, 512, 1, 1)
    # v1.5: the stride of a down-sampling block sits on its 3x3 convolution
    assert model.layer2[0].conv2.stride == (2, 2) and model.layer2[0].conv1.stride == (1, 1)
    assert model.layer2[0].downsample[0].stride == (2, 2) and model.layer1[0].conv2.stride == (1, 1)

    # the factory's own random init round-trips strictly into a fresh module
    other = factory(**args)
    other.load_state_dict(state, strict=True)
    assert all(torch.equal(other.state_dict()[k], v) for k, v in state.items())
    # the 2017 torchvision checkpoint has no num_batches_tracked buffers: BatchNorm fills them in, strictly
    old = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    assert len(old) == 320 - 53
    factory(**args).load_state_dict(old, strict=True)


@pytest.fixture(scope="module")
def resnet_weights(tmp_path_factory) -> tuple[dict[str, Any], Path]:
    """Weights from the factory's own init with every batch norm given non-trivial statistics (so folding them
    matters), scaled so the logits spread over a few units; saved like the 2017 checkpoint (legacy format, no
    num_batches_tracked)."""
    factory, args = _factory("resnet50@pytorch")
    torch.manual_seed(0)
    model = factory(**args)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                if name.endswith("bn3"):
                    m.weight.mul_(0.2)  # keep the sum over 16 residual blocks bounded
                m.bias.normal_(0, 0.1, generator=g)
                m.running_mean.normal_(0, 0.1, generator=g)
                m.running_var.uniform_(0.5, 2.0, generator=g)
        model.fc.weight.mul_(20.0)
    state = {k: v.clone() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    path = tmp_path_factory.mktemp("resnet50") / "resnet50-random.pth"
    torch.save(state, path, _use_new_zipfile_serialization=False)
    return state, path


@pytest.fixture(scope="module")
def resnet_input() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 3, 224, 224)).astype(np.float32)
    return x * np.array([1.0, 2.0, 0.5], np.float32)[:, None, None, None] + np.float32(0.3)


@pytest.fixture(scope="module")
def factory_outputs(resnet_weights, resnet_input) -> tuple[np.ndarray, np.ndarray]:
    """(ArgMax, softmax) of the manifest's factory module with the test weights, loaded strictly."""
    factory, args = _factory("resnet50@pytorch")
    model = factory(**args).eval()
    model.load_state_dict(resnet_weights[0], strict=True)
    with torch.inference_mode():
        label, probs = model(torch.from_numpy(resnet_input))
    assert label.dtype == torch.int64 and tuple(probs.shape) == (3, 1000)
    return label.numpy(), probs.numpy()


def test_resnet50_factory_matches_the_onnx_resnet50(resnet_weights, resnet_input, factory_outputs) -> None:
    """The same weights through torchvision's forward (the factory) and the ONNX graph resnet50-1000 builds from
    torchvision weights (batch norms folded): the same classes and log-probabilities."""
    import onnxruntime as ort

    from mlharness.tasks.imagenet.resnet50_onnx import torchvision_resnet50

    graph = torchvision_resnet50({k: v.numpy() for k, v in resnet_weights[0].items()})
    sess = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    onnx_label, onnx_probs = sess.run(["ArgMax:0", "softmax_tensor:0"], {"input_tensor:0": resnet_input})
    label, probs = factory_outputs
    log_probs = np.log(probs)
    assert np.ptp(log_probs, axis=1).min() > 1.0  # the comparison is not between flat distributions
    np.testing.assert_array_equal(label, onnx_label)
    np.testing.assert_allclose(log_probs, np.log(onnx_probs), atol=1e-3)


def test_resnet50_pytorch_variant_runs_in_the_predictor(resnet_weights, resnet_input, factory_outputs) -> None:
    """The variant as a run builds it: the factory named in the manifest, the checkpoint loaded strictly by the
    pytorch predictor from a legacy-format file without num_batches_tracked; postprocess's offset is 0."""
    m = load_manifest("resnet50@pytorch").model
    predictor = PREDICTORS.get("pytorch")(PredictorConfig(
        model_path=None, input_names=[i.name for i in m.inputs], output_names=[o.name for o in m.outputs],
        options=dict(m.framework.options), factory=m.model.factory, weights_path=str(resnet_weights[1]),
        max_batchsize=4))
    predictor.load()
    try:
        label, probs = predictor.predict([resnet_input])
    finally:
        predictor.close()
    np.testing.assert_array_equal(label, factory_outputs[0])
    np.testing.assert_allclose(probs, factory_outputs[1], rtol=1e-5, atol=1e-7)
    assert label.dtype == np.int64 and m.attributes["label_offset"] == 0


def test_resnet50_tensorflow_variant_names_resolve_in_a_frozen_graph(tmp_path) -> None:
    """A frozen graph with the reference TF ResNet50's interface (NHWC ``input_tensor``, ``ArgMax``,
    ``softmax_tensor``) runs under the variant's tensor names with the variant's HWC pre-processing."""
    pytest.importorskip("tensorflow")
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    from mlharness.tasks.imagenet import preprocess as vision

    rng = np.random.default_rng(0)
    w = tf.Variable(rng.standard_normal((3, 1001)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 224, 224, 3], tf.float32, name="input_tensor")])
    def serve(x):
        logits = tf.matmul(tf.reduce_mean(x, axis=[1, 2]), w)
        return tf.argmax(logits, axis=1, name="ArgMax"), tf.nn.softmax(logits, name="softmax_tensor")

    frozen = convert_variables_to_constants_v2(serve.get_concrete_function())
    pb = tmp_path / "resnet50_v1.pb"
    pb.write_bytes(frozen.graph.as_graph_def().SerializeToString())

    m = load_manifest("resnet50@tensorflow").model
    image = tmp_path / "img.jpg"
    import cv2

    cv2.imwrite(str(image), rng.integers(0, 255, (300, 400, 3), dtype=np.uint8))
    ctx = {"inputs": [i.model_dump() for i in m.inputs], "attributes": dict(m.attributes)}
    x = vision.preprocess_from_spec(ctx, image)
    assert x.shape == (224, 224, 3)
    predictor = PREDICTORS.get("tensorflow")(PredictorConfig(
        model_path=str(pb), input_names=[i.name for i in m.inputs], output_names=[o.name for o in m.outputs]))
    predictor.load()
    try:
        label, probs = predictor.predict([x[None]])
    finally:
        predictor.close()
    expected = x.mean(axis=(0, 1)) @ w.numpy()
    assert label.tolist() == [int(expected.argmax())] and probs.shape == (1, 1001)


# -------------------------------------------------------------------------------------------------- BERT (pytorch)

TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
             "max_position_embeddings": 512, "vocab_size": 120}


def _reference_bert_keys(layers: int) -> list[str]:
    """The keys ``BertForQuestionAnswering.state_dict()`` had under transformers 2.4, which wrote model.pytorch:
    embeddings, 16 per encoder layer, the pooler and the QA head."""
    keys = [f"bert.embeddings.{n}.weight" for n in ("word_embeddings", "position_embeddings",
                                                    "token_type_embeddings")]
    keys += ["bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias"]
    per_layer = [f"attention.self.{n}" for n in ("query", "key", "value")]
    per_layer += ["attention.output.dense", "attention.output.LayerNorm", "intermediate.dense", "output.dense",
                  "output.LayerNorm"]
    for i in range(layers):
        keys += [f"bert.encoder.layer.{i}.{m}.{p}" for m in per_layer for p in ("weight", "bias")]
    return keys + ["bert.pooler.dense.weight", "bert.pooler.dense.bias", "qa_outputs.weight", "qa_outputs.bias"]


def test_bert_manifest_builds_bert_large() -> None:
    from mlharness.tasks.squad.bert_torch import BERT_LARGE_CONFIG

    m = load_manifest("bert@pytorch").model
    args = m.framework.options["factory_args"]
    assert args["config"] == BERT_LARGE_CONFIG  # the manifest spells out the reference's bert_config.json
    assert (args["config"]["num_hidden_layers"], args["config"]["hidden_size"]) == (24, 1024)
    assert [i.name for i in m.inputs] == ["input_ids", "input_mask", "segment_ids"]
    factory, args = _factory("bert@pytorch")
    with torch.device("meta"):  # shapes only: no 1.3 GB of random weights
        model = factory(**args)
    # BERT-Large QA: 334,094,338 parameters; the checkpoint's 393 keys less the 2 pooler keys it does not use
    assert sum(p.numel() for p in model.parameters()) == 334_094_338
    assert sorted(model.state_dict()) == sorted(k for k in _reference_bert_keys(24) if ".pooler." not in k)


def test_bert_factory_loads_the_reference_checkpoint_layout(tmp_path) -> None:
    """A tiny BERT through ``framework.options.factory_args``: a checkpoint with the reference's keys (pooler
    included, legacy torch format) loads strictly in the pytorch predictor, and the positional three-input module
    answers what transformers' BertForQuestionAnswering answers with those weights."""
    from transformers import BertConfig, BertForQuestionAnswering

    m = load_manifest("bert@pytorch").model
    options = dict(m.framework.options)
    options["factory_args"] = {**options["factory_args"], "config": TINY_BERT}

    torch.manual_seed(0)
    hf = BertForQuestionAnswering(BertConfig(**TINY_BERT, attn_implementation="eager")).eval()
    state = dict(hf.state_dict())
    state["bert.pooler.dense.weight"] = torch.randn(32, 32)
    state["bert.pooler.dense.bias"] = torch.randn(32)
    assert sorted(state) == sorted(_reference_bert_keys(2))
    path = tmp_path / "model.pytorch"
    torch.save(state, path, _use_new_zipfile_serialization=False)

    predictor = PREDICTORS.get("pytorch")(PredictorConfig(
        model_path=None, input_names=[i.name for i in m.inputs], output_names=[o.name for o in m.outputs],
        options=options, factory=m.model.factory, weights_path=str(path), max_batchsize=2))
    predictor.load()
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 120, (2, 384)).astype(np.int64)
    mask = np.ones((2, 384), np.int64)
    mask[1, 200:] = 0
    segments = np.zeros((2, 384), np.int64)
    segments[:, 20:] = 1
    try:
        start, end = predictor.predict([ids, mask, segments])
    finally:
        predictor.close()
    with torch.inference_mode():
        out = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                 token_type_ids=torch.from_numpy(segments))
    assert start.shape == end.shape == (2, 384)
    np.testing.assert_allclose(start, out.start_logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(end, out.end_logits.numpy(), atol=1e-5)


def test_bert_factory_still_loads_strictly() -> None:
    """Only the unused pooler and buffer keys are forgiven: a missing or misnamed weight still fails."""
    from mlharness.tasks.squad.bert_torch import bert_squad

    model = bert_squad(config=TINY_BERT)
    state = dict(model.state_dict())
    state["bert.embeddings.position_ids"] = torch.arange(512)[None]
    bert_squad(config=TINY_BERT).load_state_dict(state, strict=True)
    state["qa_outputs.kernel"] = state.pop("qa_outputs.weight")
    with pytest.raises(RuntimeError, match=re.escape("qa_outputs.weight")):
        bert_squad(config=TINY_BERT).load_state_dict(state, strict=True)


# ----------------------------------------------------------------------------------------------- 3D U-Net (pytorch)


def test_3d_unet_pytorch_variant_loads_a_ptc_torchscript_file(tmp_path) -> None:
    """The reference ships TorchScript as ``.ptc``: the pytorch predictor loads it as TorchScript and runs a
    patch of the manifest's shape, returning the declared output shape."""
    m = load_manifest("3d-unet@pytorch").model
    assert m.model.graph_path.split("?")[0].endswith(".ptc") and m.model.factory is None
    conv = torch.nn.Conv3d(1, 3, 1)
    path = tmp_path / "3dunet_kits19_pytorch.ptc"
    torch.jit.save(torch.jit.script(conv), str(path))
    predictor = PREDICTORS.get("pytorch")(PredictorConfig(
        model_path=str(path), input_names=[i.name for i in m.inputs], output_names=[o.name for o in m.outputs]))
    predictor.load()
    x = np.random.default_rng(0).standard_normal((1, *m.inputs[0].shape)).astype(np.float32)
    try:
        (y,) = predictor.predict([x])
    finally:
        predictor.close()
    assert predictor.kind == "TorchScript" and y.shape == (1, *m.outputs[0].shape)
    with torch.inference_mode():
        np.testing.assert_allclose(y, conv(torch.from_numpy(x)).numpy(), atol=1e-5)
