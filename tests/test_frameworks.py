"""PyTorch and TensorFlow predictors: every supported model format loads and computes what the weights say;
the same manifest runs in every scenario through the real CLI in each framework."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import PredictorError
from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from tests.helpers import framework_models as fm

X = np.arange(20, dtype=np.float32).reshape(5, 4) / 7.0


def _predict(framework: str, path: Path | None, inputs=("x",), outputs=("y",), **kw) -> np.ndarray:
    cfg = PredictorConfig(model_path=str(path) if path else None, input_names=list(inputs),
                          output_names=list(outputs), **kw)
    p = PREDICTORS.get(framework)(cfg)
    p.load()
    try:
        return p.predict([X])[0]
    finally:
        p.close()


def test_torchscript(tmp_path):
    out = _predict("pytorch", fm.write_torchscript(tmp_path / "m.pt"))
    np.testing.assert_allclose(out, fm.expected(X), rtol=1e-6, atol=1e-6)


def test_torch_export_program(tmp_path):
    out = _predict("pytorch", fm.write_torch_export(tmp_path / "m.pt2"))
    np.testing.assert_allclose(out, fm.expected(X), rtol=1e-6, atol=1e-6)


def test_torch_factory_with_state_dict(tmp_path, monkeypatch):
    factory, weights = fm.write_factory(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = _predict("pytorch", None, factory=factory, weights_path=str(weights))
    np.testing.assert_allclose(out, fm.expected(X), rtol=1e-6, atol=1e-6)
    # without the weights the factory's random init gives other numbers: the state dict was really applied
    other = _predict("pytorch", None, factory=factory)
    assert not np.allclose(other, fm.expected(X))


def test_torch_half_precision_returns_float32(tmp_path):
    out = _predict("pytorch", fm.write_torchscript(tmp_path / "m.pt"), options={"dtype": "bfloat16"})
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, fm.expected(X), rtol=0.05, atol=0.1)


def test_torch_errors(tmp_path):
    with pytest.raises(PredictorError, match="no CUDA device|cuda"):
        if __import__("torch").cuda.is_available():
            pytest.skip("a GPU is present")
        _predict("pytorch", fm.write_torchscript(tmp_path / "m.pt"), device="cuda:0")
    with pytest.raises(PredictorError, match="unknown pytorch option"):
        _predict("pytorch", tmp_path / "m.pt", options={"dtyp": "float16"})
    with pytest.raises(PredictorError, match="cannot load"):
        (tmp_path / "bad.pt").write_bytes(b"not a model")
        _predict("pytorch", tmp_path / "bad.pt")


def test_tensorflow_saved_model(tmp_path):
    out = _predict("tensorflow", fm.write_saved_model(tmp_path / "saved"))
    np.testing.assert_allclose(out, fm.expected(X), rtol=1e-6, atol=1e-6)
    with pytest.raises(PredictorError, match="not in signature"):
        _predict("tensorflow", tmp_path / "saved", inputs=("images",))
    with pytest.raises(PredictorError, match="no signature 'predict'"):
        _predict("tensorflow", tmp_path / "saved", options={"signature": "predict"})


def test_tensorflow_frozen_graph(tmp_path):
    out = _predict("tensorflow", fm.write_frozen_graph(tmp_path / "frozen.pb"), inputs=("x:0",), outputs=("y:0",))
    np.testing.assert_allclose(out, fm.expected(X), rtol=1e-6, atol=1e-6)
    with pytest.raises(PredictorError, match="needs every input and output tensor named"):
        _predict("tensorflow", tmp_path / "frozen.pb", inputs=(None,), outputs=("y:0",))


MANIFEST = """\
name: affine_{fw}
framework: {{name: {fw}, version: "{version}"}}
inputs: [{{name: {inp}, element_type: float32, shape: [4]}}]
outputs: [{{name: {out}, element_type: float32, shape: [3]}}]
model: {{graph_path: {graph}}}
batching: {{max_batchsize: 4}}
dataset:
  name: ramp
  init: |
    def init(count):
        return 24
preprocess: |
  import numpy as np
  def preprocess(ctx, index):
      return (np.arange(4, dtype=np.float32) + index) / 7.0
"""


def _write_manifest(tmp_path: Path, fw: str, version: str = "*") -> Path:
    if fw == "pytorch":
        graph, inp, out = fm.write_torchscript(tmp_path / "m.pt").name, "x", "y"
    elif fw == "tensorflow":
        graph, inp, out = fm.write_saved_model(tmp_path / "saved").name, "x", "y"
    else:
        raise AssertionError(fw)
    path = tmp_path / f"{fw}.yaml"
    path.write_text(MANIFEST.format(fw=fw, version=version, inp=inp, out=out, graph=graph))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("fw", ["pytorch", "tensorflow"])
def test_all_scenarios_through_the_cli(run_cli, tmp_path, fw):
    manifest = _write_manifest(tmp_path, fw)
    expected = {i: fm.expected(((np.arange(4, dtype=np.float32) + i) / 7.0)[None])[0] for i in range(24)}
    for scenario in ("SingleStream", "MultiStream", "Server", "Offline"):
        out = tmp_path / scenario
        proc = run_cli("run", "--manifest", str(manifest), "--scenario", scenario, "--mode", "accuracy",
                       "--output", str(out), "--no-progress")
        assert proc.returncode == 0, proc.stderr
        entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
        assert sorted({e["qsl_idx"] for e in entries}) == list(range(24))
        for e in entries:
            got = np.frombuffer(bytes.fromhex(e["data"]), np.float32)
            np.testing.assert_allclose(got, expected[e["qsl_idx"]], rtol=1e-5, atol=1e-5)
        meta = json.loads((out / "mlharness_run.json").read_text())
        assert meta["framework"]["name"] == fw
    perf = tmp_path / "perf"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "performance",
                   "--output", str(perf), "--no-progress", "--min-duration-ms", "300", "--target-qps", "200000",
                   "--min-query-count", "64")
    assert proc.returncode == 0, proc.stderr
    assert "Result is : VALID" in (perf / "mlperf_log_summary.txt").read_text()


@pytest.mark.parametrize("fw", ["pytorch", "tensorflow"])
def test_framework_version_mismatch_names_both(run_cli, tmp_path, fw):
    manifest = _write_manifest(tmp_path, fw, version=">=99.0")
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy",
                   "--output", str(tmp_path / "o"), "--no-progress")
    assert proc.returncode == 2
    package = "torch" if fw == "pytorch" else "tensorflow"
    assert f"requires {package}" in proc.stderr and ">=99.0" in proc.stderr
    installed = __import__("torch" if fw == "pytorch" else "tensorflow").__version__
    assert installed in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_listing_does_not_import_frameworks():
    """`manifest list` and `--help` never import torch or tensorflow (the registry is lazy)."""
    import subprocess

    code = textwrap.dedent("""\
        import sys
        from mlharness.cli import main
        main(["manifest", "list"])
        assert "torch" not in sys.modules and "tensorflow" not in sys.modules, sorted(sys.modules)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def variant_manifest(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("variants")
    fm.write_all(folder)
    path = folder / "affine.yaml"
    path.write_text(fm.VARIANT_MANIFEST)
    return path


@pytest.mark.slow
def test_one_manifest_three_frameworks(run_cli, tmp_path, variant_manifest):
    results = {}
    for fw, args in {"onnxruntime": [], "pytorch": ["--framework", "pytorch"], "tensorflow": []}.items():
        ref = f"{variant_manifest}@tensorflow" if fw == "tensorflow" else str(variant_manifest)
        out = tmp_path / fw
        proc = run_cli("run", "--manifest", ref, *args, "--scenario", "Offline", "--mode", "accuracy",
                       "--output", str(out), "--no-progress")
        assert proc.returncode == 0, proc.stderr
        meta = json.loads((out / "mlharness_run.json").read_text())
        assert meta["framework"]["name"] == fw
        entries = sorted(json.loads((out / "mlperf_log_accuracy.json").read_text()), key=lambda e: e["qsl_idx"])
        results[fw] = np.stack([np.frombuffer(bytes.fromhex(e["data"]), np.float32) for e in entries])
    np.testing.assert_allclose(results["pytorch"], results["onnxruntime"], atol=1e-5)
    np.testing.assert_allclose(results["tensorflow"], results["onnxruntime"], atol=1e-5)


def test_unknown_variant_is_named(run_cli, variant_manifest, tmp_path):
    proc = run_cli("run", "--manifest", f"{variant_manifest}@pytorh", "--scenario", "Offline", "--mode",
                   "accuracy", "--output", str(tmp_path / "o"), "--no-progress")
    assert proc.returncode == 2
    assert "no 'pytorh' variant" in proc.stderr and "Did you mean 'pytorch'?" in proc.stderr


@pytest.mark.slow
def test_parity_command(run_cli, variant_manifest):
    proc = run_cli("parity", f"{variant_manifest}@onnxruntime", f"{variant_manifest}@pytorch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AGREE" in proc.stdout and "over 24 samples" in proc.stdout
    linf = float(proc.stdout.split("l-inf ")[1].split()[0])
    assert linf < 1e-5


def test_parity_detects_a_different_model(tmp_path, monkeypatch, variant_manifest):
    """A model with other weights disagrees: exit status 1 and an l-inf above the tolerance."""
    from mlharness.measurement.parity import compare, passes

    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    other = tmp_path / "other.yaml"
    (tmp_path / "affine.onnx").write_bytes((variant_manifest.parent / "affine.onnx").read_bytes())
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(tmp_path / "affine.onnx"))
    for init in m.graph.initializer:
        if init.name == "B":
            init.CopyFrom(numpy_helper.from_array(fm.B + 0.5, "B"))
    onnx.save(m, str(tmp_path / "affine.onnx"))
    other.write_text(fm.VARIANT_MANIFEST.split("frameworks:")[0] + "batching:" +
                     fm.VARIANT_MANIFEST.split("batching:")[1])
    report = compare(str(variant_manifest), str(other))
    assert abs(report.linf - 0.5) < 1e-5
    assert not passes(report, 1e-4)


@pytest.mark.slow
def test_random_bert_parity_onnx_vs_pytorch(run_cli):
    """The random BERT QA model in ONNX and as TorchScript (same weights) agree on synthetic SQuAD features."""
    proc = run_cli("parity", "bert-random@onnxruntime", "bert-random@pytorch", "--count", "8", "--tolerance",
                   "1e-3", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AGREE" in proc.stdout
    outputs = [line for line in proc.stdout.splitlines() if line.strip().startswith("output ")]
    assert len(outputs) == 2
    for line in outputs:
        if "l-inf" in line:
            assert float(line.split("l-inf ")[1].split()[0]) < 1e-3
            assert "agreement 1.000000" in line
