"""One manifest, three frameworks: the ImageNet oracle as ONNX, TorchScript and a TF SavedModel scores 100% on
synthetic ImageNet through `mlharness run`, and `mlharness parity` finds every pair equal."""

from __future__ import annotations

import itertools

import pytest

from mlharness.tasks.imagenet.synth import write_synthetic_imagenet

pytestmark = pytest.mark.slow

COUNT = 64


@pytest.fixture(scope="module")
def imagenet_dir(tmp_path_factory):
    return write_synthetic_imagenet(tmp_path_factory.mktemp("imagenet") / "val", COUNT)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_oracle_scores_100_in_each_framework(run_cli, tmp_path, imagenet_dir, framework):
    out = tmp_path / framework
    proc = run_cli("run", "--manifest", f"resnet50-oracle@{framework}", "--dataset-path", str(imagenet_dir),
                   "--scenario", "Offline", "--mode", "accuracy", "--output", str(out), "--no-progress",
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (out / "accuracy.txt").read_text() == f"accuracy=100.000%, good={COUNT}, total={COUNT}\n"


@pytest.mark.parametrize("a,b", list(itertools.combinations(["onnxruntime", "pytorch", "tensorflow"], 2)))
def test_parity_between_frameworks(run_cli, imagenet_dir, a, b):
    proc = run_cli("parity", f"resnet50-oracle@{a}", f"resnet50-oracle@{b}", "--dataset-path", str(imagenet_dir),
                   "--count", "32", "--tolerance", "1e-4", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip().startswith("output ")]
    assert len(lines) == 2  # ArgMax and softmax
    for line in lines:
        assert "agreement 1.000000" in line
        assert float(line.split("l-inf ")[1].split()[0]) < 1e-4
