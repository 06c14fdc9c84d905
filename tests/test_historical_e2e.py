"""The MLModelScope ONNX Runtime agent's MLPerf_ResNet_50_v1.5.yml and TorchVision_ResNet_18.yml, and c3sr/dlmodel's
ResNet50_v1.5.yml with an MLHarness dataset manifest, committed byte for byte under tests/fixtures/historical/,
run in accuracy mode (top-1 on a labels file) and in the four scenarios. The published model files are swapped
for locally generated graphs of the same input/output contract with $MLHARNESS_MODEL_FILE, never by editing."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from mlharness.tasks.generic.models import write_classifier, write_torchscript_classifier
from mlharness.tasks.generic.synth import write_colour_folder

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "historical"
SHORT = {
    "SingleStream": ["--min-duration-ms", "200", "--min-query-count", "32", "--target-latency-ms", "1"],
    "MultiStream": ["--min-duration-ms", "200", "--min-query-count", "32", "--target-latency-ms", "1"],
    "Server": ["--min-duration-ms", "500", "--min-query-count", "50", "--target-qps", "200",
               "--target-latency-ms", "200"],
    "Offline": ["--min-duration-ms", "100", "--min-query-count", "50", "--target-qps", "5000"],
}
# the published graphs: (input name, output names, background class, mean, scale)
CONTRACTS = {
    "MLPerf_ResNet_50_v1.5.yml": ("input_tensor:0", ["ArgMax:0", "softmax_tensor:0"], True,
                                  [123.68, 116.78, 103.94], [1, 1, 1]),
    "ResNet50_v1.5.yml": ("input_tensor:0", ["ArgMax:0", "softmax_tensor:0"], True,
                          [123.68, 116.78, 103.94], [1, 1, 1]),
    "TorchVision_ResNet_18.yml": ("input", ["output"], False, [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]),
}
# the dataset manifest each one runs with: the built-in folder of files (paths), or the MLHarness one (indices)
DATASETS = {"MLPerf_ResNet_50_v1.5.yml": "files", "TorchVision_ResNet_18.yml": "files",
            "ResNet50_v1.5.yml": str(FIXTURES / "imagenet_mlharness.yml")}
# md5 of the files as published (c3sr/onnxruntime builtin_models/, c3sr/dlmodel models/vision/onnxruntime/
# mlcommons_inference/): the fixtures stay verbatim
PUBLISHED = {"MLPerf_ResNet_50_v1.5.yml": "444787ac5ae1b0aafd3b73e388e4e28c",
             "TorchVision_ResNet_18.yml": "d0a33e4c985436b48ac814ad42ada191",
             "ResNet50_v1.5.yml": "75367e205b6624b95a894efac80c2bd6",
             "TensorFlow_ResNet_v1_50.yml": "806e4c1fc514d3dbd113610348fa3137",
             "PyTorch_TorchVision_ResNet_18.yml": "2d6232f1cc6913af0aaa4167ca25ea12"}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("historical") / "images"
    write_colour_folder(root, 20, seed=3)
    shutil.copy(root / "labels.txt", root / "val_map.txt")  # the MLHarness dataset manifest reads val_map.txt
    return root


def _model(tmp: Path, manifest: str) -> Path:
    name, outputs, background, mean, scale = CONTRACTS[manifest]
    return write_classifier(tmp / f"{manifest}.onnx", mean=mean, scale=scale, background=background,
                            input_name=name, outputs=outputs)


def _run(run_cli, cli_env, manifest, model, images, out, *args):
    env = {**cli_env, "MLHARNESS_MODEL_FILE": str(model)}
    return run_cli("run", "--manifest", str(FIXTURES / manifest), "--dataset", DATASETS[manifest],
                   "--dataset-path", str(images), "--output", str(out), "--no-progress", *args, env=env)


def test_fixtures_are_the_published_files():
    for name, digest in PUBLISHED.items():
        raw = (FIXTURES / name).read_bytes()
        assert hashlib.md5(raw).hexdigest() == digest, f"{name} was edited"
        assert b"store.carml.org/models/" in raw


@pytest.mark.parametrize("manifest", list(CONTRACTS))
def test_accuracy_top1_on_a_labels_file(run_cli, cli_env, tmp_path, images, manifest):
    model = _model(tmp_path, manifest)
    out = tmp_path / "acc"
    proc = _run(run_cli, cli_env, manifest, model, images, out, "--scenario", "Offline", "--mode", "accuracy")
    assert proc.returncode == 0, proc.stderr
    labels = [line.split()[1] for line in (images / "labels.txt").read_text().splitlines()]
    assert len(set(labels)) > 1
    assert (out / "accuracy.txt").read_text() == f"accuracy=100.000%, good={len(labels)}, total={len(labels)}\n"


def test_a_wrong_label_is_counted(run_cli, cli_env, tmp_path, images):
    """The figure comes from the labels file: one label changed, one sample fewer is good."""
    data = tmp_path / "images"
    shutil.copytree(images, data)
    lines = (data / "labels.txt").read_text().splitlines()
    name, label = lines[0].split()
    lines[0] = f"{name} {int(label) + 1}"
    (data / "labels.txt").write_text("\n".join(lines) + "\n")
    manifest = "TorchVision_ResNet_18.yml"
    out = tmp_path / "acc"
    proc = _run(run_cli, cli_env, manifest, _model(tmp_path, manifest), data, out, "--scenario", "Offline",
                "--mode", "accuracy")
    assert proc.returncode == 0, proc.stderr
    n = len(lines)
    assert (out / "accuracy.txt").read_text() == f"accuracy={100.0 * (n - 1) / n:.3f}%, good={n - 1}, total={n}\n"


@pytest.mark.parametrize("scenario", list(SHORT))
@pytest.mark.parametrize("manifest", list(CONTRACTS))
def test_performance_in_every_scenario(run_cli, cli_env, tmp_path, images, manifest, scenario):
    out = tmp_path / "perf"
    proc = _run(run_cli, cli_env, manifest, _model(tmp_path, manifest), images, out, "--scenario", scenario,
                "--mode", "performance", *SHORT[scenario])
    assert proc.returncode == 0, proc.stderr
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert f"Scenario : {scenario}" in summary
    assert "Result is : VALID" in summary or "Result is : INVALID" in summary


def test_the_pytorch_agent_manifest_runs(run_cli, cli_env, tmp_path, images):
    """c3sr/pytorch's TorchVision_ResNet_18.yml (no hooks) on a TorchScript stand-in."""
    model = write_torchscript_classifier(tmp_path / "resnet18.pt", mean=[123.675, 116.28, 103.53],
                                         scale=[58.395, 57.12, 57.375])
    out = tmp_path / "acc"
    proc = run_cli("run", "--manifest", str(FIXTURES / "PyTorch_TorchVision_ResNet_18.yml"), "--dataset", "files",
                   "--dataset-path", str(images), "--output", str(out), "--no-progress", "--scenario", "Offline",
                   "--mode", "accuracy", env={**cli_env, "MLHARNESS_MODEL_FILE": str(model)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    n = len((images / "labels.txt").read_text().splitlines())
    assert (out / "accuracy.txt").read_text() == f"accuracy=100.000%, good={n}, total={n}\n"
