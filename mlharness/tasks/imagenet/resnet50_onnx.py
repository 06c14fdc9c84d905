"""ResNet50-v1.5 as an ONNX graph built with ``onnx.helper``: random weights for benchmarks, or torchvision weights.

The graph has the MLPerf reference model's interface (``input_tensor:0`` NCHW float32 in, ``ArgMax:0`` int64 and
``softmax_tensor:0`` out) so manifests, pre-processing and accuracy code run unchanged against either. v1.5 puts
the stride-2 on the 3x3 convolution of each down-sampling bottleneck (v1 puts it on the first 1x1), as torchvision
and the MLPerf reference do. Batch norms are folded into the convolutions, which is what an inference export does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from mlharness.errors import AssetError
from mlharness.fileguard import DATA_FILE_LIMIT, torch_load
from mlharness.tasks.files import atomic_write_bytes, mark_generated, reuse_generated

log = logging.getLogger(__name__)

INPUT_NAME = "input_tensor:0"
ARGMAX_NAME = "ArgMax:0"
SOFTMAX_NAME = "softmax_tensor:0"
STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))  # (bottleneck width, blocks); output width is 4x
EXPANSION = 4
OPSET = 17
IR_VERSION = 8  # loadable by onnxruntime >= 1.14
BN_EPS = 1e-5  # torchvision's BatchNorm2d default

# The MLPerf reference's PyTorch ResNet50-v1.5 weights (torchvision's layout, 1000 classes); md5 from
# mlcommons/cm4mlops script/get-ml-model-resnet50 (variation "pytorch,fp32").
TORCHVISION_WEIGHTS_URL = "https://zenodo.org/record/4588417/files/resnet50-19c8e357.pth"
TORCHVISION_WEIGHTS_MD5 = "9e9c86b324d80e65229fab49b8d9a8e8"

# (out channels, in channels, kernel) -> (weight [out, in, k, k], bias [out]) for one named convolution
ConvSource = Callable[[str, int, int, int], tuple[np.ndarray, np.ndarray]]


def conv_layout() -> Iterator[tuple[str, int, int, int]]:
    """(torchvision module name, out channels, in channels, kernel) of every convolution, in graph order."""
    yield "conv1", 64, 3, 7
    cin = 64
    for s, (width, blocks) in enumerate(STAGES, start=1):
        for b in range(blocks):
            p = f"layer{s}.{b}"
            yield f"{p}.conv1", width, cin, 1
            yield f"{p}.conv2", width, width, 3
            yield f"{p}.conv3", width * EXPANSION, width, 1
            if b == 0:
                yield f"{p}.downsample.0", width * EXPANSION, cin, 1
            cin = width * EXPANSION


def build_resnet50(conv: ConvSource, fc_weight: np.ndarray, fc_bias: np.ndarray, doc: str):  # -> onnx.ModelProto
    """The graph; ``conv`` supplies each folded convolution, ``fc_*`` the classifier ([classes, 2048], [classes])."""
    from onnx import helper, numpy_helper

    nodes: list = []
    inits: list = []

    def conv_node(x: str, name: str, cout: int, cin: int, k: int, stride: int, relu: bool) -> str:
        w, b = conv(name, cout, cin, k)
        if w.shape != (cout, cin, k, k) or b.shape != (cout,):
            raise AssetError(f"ResNet50 weights: {name} has shape {w.shape}/{b.shape}, expected "
                             f"{(cout, cin, k, k)}/{(cout,)}")
        inits.append(numpy_helper.from_array(np.ascontiguousarray(w, np.float32), f"{name}.weight"))
        inits.append(numpy_helper.from_array(np.ascontiguousarray(b, np.float32), f"{name}.bias"))
        out = f"{name}.out"
        nodes.append(helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"], [out], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        if relu:
            nodes.append(helper.make_node("Relu", [out], [f"{name}.relu"], name=f"{name}.relu"))
            return f"{name}.relu"
        return out

    x = conv_node(INPUT_NAME, "conv1", 64, 3, 7, 2, True)
    nodes.append(helper.make_node("MaxPool", [x], ["pool1"], name="maxpool", kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1]))
    x, cin = "pool1", 64
    for s, (width, blocks) in enumerate(STAGES, start=1):
        for b in range(blocks):
            p = f"layer{s}.{b}"
            stride = 2 if b == 0 and s > 1 else 1
            y = conv_node(x, f"{p}.conv1", width, cin, 1, 1, True)
            y = conv_node(y, f"{p}.conv2", width, width, 3, stride, True)  # v1.5: the stride sits here
            y = conv_node(y, f"{p}.conv3", width * EXPANSION, width, 1, 1, False)
            shortcut = conv_node(x, f"{p}.downsample.0", width * EXPANSION, cin, 1, stride, False) if b == 0 else x
            nodes.append(helper.make_node("Add", [y, shortcut], [f"{p}.sum"], name=f"{p}.add"))
            nodes.append(helper.make_node("Relu", [f"{p}.sum"], [f"{p}.out"], name=f"{p}.relu"))
            x, cin = f"{p}.out", width * EXPANSION
    classes = int(fc_weight.shape[0])
    inits.append(numpy_helper.from_array(np.ascontiguousarray(fc_weight, np.float32), "fc.weight"))
    inits.append(numpy_helper.from_array(np.ascontiguousarray(fc_bias, np.float32), "fc.bias"))
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["pooled"], name="avgpool"),
        helper.make_node("Flatten", ["pooled"], ["features"], name="flatten", axis=1),
        helper.make_node("Gemm", ["features", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], [SOFTMAX_NAME], name="softmax", axis=1),
        helper.make_node("ArgMax", ["logits"], [ARGMAX_NAME], name="argmax", axis=1, keepdims=0),
    ]
    return classifier_model(nodes, inits, "resnet50_v1.5", classes, doc)


def classifier_model(nodes: list, initializers: list, name: str, classes: int, doc: str):  # -> onnx.ModelProto
    """A checked model with the MLPerf ResNet50's I/O: ``input_tensor:0`` [batch, 3, 224, 224] float32 in,
    ``ArgMax:0`` [batch] int64 and ``softmax_tensor:0`` [batch, classes] out (what ``nodes`` must compute)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, name,
        inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", 3, 224, 224])],
        outputs=[helper.make_tensor_value_info(ARGMAX_NAME, TensorProto.INT64, ["batch"]),
                 helper.make_tensor_value_info(SOFTMAX_NAME, TensorProto.FLOAT, ["batch", classes])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="mlharness",
                              doc_string=doc)
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def random_resnet50(classes: int = 1001, seed: int = 0):  # -> onnx.ModelProto
    """Full-size ResNet50-v1.5 (~25.6M parameters) with random weights: real cost, meaningless answers.

    He-initialised so activations stay finite; the last convolution of each block is scaled down (as with
    zero-init residuals) so the sum over 16 residual blocks does not blow up to inf.
    """
    rng = np.random.default_rng(seed)

    def conv(name: str, cout: int, cin: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        std = np.sqrt(2.0 / (cin * k * k)) * (0.2 if name.endswith("conv3") else 1.0)
        w = rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.float32(std)
        return w, np.zeros(cout, np.float32)

    fc_w = rng.standard_normal((classes, 2048), dtype=np.float32) * np.float32(0.01)
    return build_resnet50(conv, fc_w, np.zeros(classes, np.float32),
                          f"mlharness: ResNet50-v1.5, random weights (seed {seed}), {classes} classes")


def fold_batchnorm(w: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
                   eps: float = BN_EPS) -> tuple[np.ndarray, np.ndarray]:
    """Conv (no bias) followed by inference-mode BatchNorm, as one conv: w * s, beta - mean * s, s = g/sqrt(v+e)."""
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    return ((w * scale[:, None, None, None]).astype(np.float32),
            (beta - mean * scale).astype(np.float32))


def torchvision_resnet50(state: dict[str, np.ndarray]):  # -> onnx.ModelProto
    """The graph for a torchvision ``resnet50`` state dict (numpy arrays by key), BNs folded, 1000 classes."""

    def take(key: str) -> np.ndarray:
        if key not in state:
            raise AssetError(f"ResNet50 weights: '{key}' is missing; is this a torchvision resnet50 state dict?")
        return np.asarray(state[key], dtype=np.float32)

    def conv(name: str, cout: int, cin: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        bn = name.replace("conv", "bn") if not name.endswith("downsample.0") else name[:-1] + "1"
        return fold_batchnorm(take(f"{name}.weight"), take(f"{bn}.weight"), take(f"{bn}.bias"),
                              take(f"{bn}.running_mean"), take(f"{bn}.running_var"))

    return build_resnet50(conv, take("fc.weight"), take("fc.bias"),
                          "mlharness: ResNet50-v1.5 from torchvision weights (BN folded), 1000 classes")


def save_model(model, path: Path) -> Path:  # model: onnx.ModelProto
    """Write atomically (temp file + rename): a reader never sees half a model."""
    return atomic_write_bytes(path, model.SerializeToString())


def _usable(path: Path, doc_prefix: str) -> bool:
    """A previously generated file: one stamped as written for ``doc_prefix``, or a loadable ONNX model whose doc
    string says what it is (then stamped)."""
    if reuse_generated(path, doc_prefix):
        return True
    import onnx

    if not path.is_file():
        return False
    try:
        if onnx.load(str(path), load_external_data=False).doc_string.startswith(doc_prefix):
            mark_generated(path, doc_prefix)
            return True
        return False
    except Exception as e:  # noqa: BLE001 - any load failure means: build it again
        log.warning("rebuilding %s: %s", path, e)
        return False


def ensure_random_resnet50(path: Path) -> Path:
    """``model.generator`` hook: the random full-size ResNet50 (1001 classes, the real model's I/O)."""
    path = Path(path)
    doc = "mlharness: ResNet50-v1.5, random weights (seed 0), 1001 classes"
    if not _usable(path, doc):
        log.info("building a random-weight ResNet50-v1.5 into %s", path)
        mark_generated(save_model(random_resnet50(), path), doc)
    return path


def ensure_torchvision_resnet50(path: Path) -> Path:
    """``model.generator`` hook: download the MLPerf PyTorch weights (checksum verified) and convert them."""
    from mlharness.manifest.assets import resolve_asset

    path = Path(path)
    if _usable(path, "mlharness: ResNet50-v1.5 from torchvision weights"):
        return path
    pth = resolve_asset(TORCHVISION_WEIGHTS_URL, checksum=f"md5:{TORCHVISION_WEIGHTS_MD5}", progress=True)
    return convert_torchvision_checkpoint(pth, path)


def convert_torchvision_checkpoint(pth: Path, path: Path) -> Path:
    """A torchvision resnet50 ``.pth`` state dict -> ONNX at ``path`` (needs torch to read the pickle)."""
    try:
        import torch  # noqa: F401 - torch_load needs it: said here with the extra to install
    except ImportError as e:
        raise AssetError("converting the PyTorch ResNet50 weights needs torch (pip install 'mlharness[torch]')") from e
    # torchvision's resnet50 weights are 98 MiB
    state = torch_load(Path(pth), "PyTorch checkpoint", DATA_FILE_LIMIT, error=AssetError)
    if not isinstance(state, dict):
        raise AssetError(f"PyTorch checkpoint {pth} holds a {type(state).__name__}, not a state dict of tensors")
    arrays = {k: v.detach().cpu().numpy() for k, v in state.items() if hasattr(v, "detach")}
    log.info("converting %s to ONNX at %s", pth, path)
    return save_model(torchvision_resnet50(arrays), path)
