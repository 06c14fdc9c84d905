"""What a run checks and records before and after LoadGen: a historical manifest without a dataset is refused
naming --dataset files, wrong declared outputs are refused naming the field, a swapped model file is said and
hashed into mlharness_run.json, Keras files load without TensorFlow's start-up lines, piped progress comes early
and piped tables are as wide as their content, and a built-in dataset manifest's failing hook is reported at its
own file and line."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.helpers.framework_models import expected, write_onnx, write_torchscript
from tests.helpers.toy_manifest import toy_manifest

HISTORICAL = Path(__file__).parent / "fixtures" / "historical" / "MLPerf_ResNet_50_v1.5.yml"
FILES_DATASET = Path(__file__).parents[1] / "mlharness" / "manifests" / "datasets" / "files.yaml"
QUICK = ["--scenario", "Offline", "--min-duration-ms", "100", "--min-query-count", "8", "--target-qps", "2000",
         "--no-calibrate"]


def _manifest(tmp_path: Path, framework: str, graph_path: str, **outputs) -> Path:
    data = toy_manifest(framework, graph_path)
    data["outputs"] = [{"name": "y", "element_type": "float32", "shape": [3], **outputs}]
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_historical_manifest_without_a_dataset_names_dataset_files(run_cli, cli_env, tmp_path):
    stand_in = tmp_path / "stand_in.onnx"
    stand_in.write_bytes(b"not read: the run stops before the model loads")
    env = {**cli_env, "MLHARNESS_MODEL_FILE": str(stand_in)}
    proc = run_cli("run", "--manifest", str(HISTORICAL), "--count", "4", "--output", str(tmp_path / "out"),
                   *QUICK, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "--dataset files --dataset-path DIR" in proc.stderr
    assert f"{HISTORICAL} is a historical" in proc.stderr
    assert "cv2" not in proc.stderr and "OpenCV" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("declared", "field", "words"), [
    ({"shape": [10]}, "outputs[0].shape", "declares [10] per sample but the model's output 'y'"),
    ({"element_type": "int64"}, "outputs[0].element_type", "declares int64 but the model's output 'y'"),
])
def test_run_refuses_wrong_declared_outputs(run_cli, tmp_path, declared, field, words):
    write_onnx(tmp_path / "affine.onnx")
    manifest = _manifest(tmp_path, "onnxruntime", "affine.onnx", **declared)
    proc = run_cli("run", "--manifest", str(manifest), "--output", str(tmp_path / "out"), *QUICK)
    assert proc.returncode == 2, proc.stderr
    assert f"{manifest}: field '{field}': {words}" in proc.stderr
    assert "LoadGen will issue" not in proc.stderr  # refused before LoadGen starts
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("declared", "field", "words"), [
    ({"shape": [10]}, "outputs[0].shape", "declares [10] per sample but the model's output 'y'"),
    ({"element_type": "int64"}, "outputs[0].element_type", "declares int64 but the model's output 'y'"),
])
def test_run_refuses_wrong_declared_outputs_of_a_model_that_says_nothing_before_running(run_cli, tmp_path, declared,
                                                                                      field, words):
    # TorchScript does not describe its outputs: the first sample's outputs are checked before anything is timed
    write_torchscript(tmp_path / "affine.pt")
    manifest = _manifest(tmp_path, "pytorch", "affine.pt", **declared)
    proc = run_cli("run", "--manifest", str(manifest), "--output", str(tmp_path / "out"), *QUICK)
    assert proc.returncode == 2, proc.stderr
    assert f"{manifest}: field '{field}': {words}" in proc.stderr
    assert "LoadGen will issue" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["affine.pt", "model.yaml"]  # nothing left behind


def test_a_torchscript_model_with_the_declared_outputs_runs(run_cli, tmp_path):
    write_torchscript(tmp_path / "affine.pt")
    proc = run_cli("run", "--manifest", str(_manifest(tmp_path, "pytorch", "affine.pt")), "--output",
                   str(tmp_path / "out"), *QUICK)
    assert proc.returncode == 0, proc.stderr


def test_a_swapped_model_file_is_said_and_hashed(run_cli, cli_env, tmp_path):
    write_onnx(tmp_path / "affine.onnx")
    swapped = write_onnx(tmp_path / "swapped.onnx")
    manifest = _manifest(tmp_path, "onnxruntime", "affine.onnx")
    env = {**cli_env, "MLHARNESS_MODEL_FILE": str(swapped)}
    proc = run_cli("run", "--manifest", str(manifest), "--output", str(tmp_path / "out"), *QUICK, env=env)
    assert proc.returncode == 0, proc.stderr
    # without -v, in the run's normal output
    assert f"{manifest}: model file {swapped} (from $MLHARNESS_MODEL_FILE) instead of affine.onnx" in proc.stderr
    facts = json.loads((tmp_path / "out" / "mlharness_run.json").read_text())["model_file"]
    assert facts == {"path": str(swapped), "kind": "file", "bytes": swapped.stat().st_size,
                     "set_by": "$MLHARNESS_MODEL_FILE",
                     "sha256": hashlib.sha256(swapped.read_bytes()).hexdigest()}


def test_a_folder_model_is_recorded_as_a_folder_with_a_digest_of_its_files(tmp_path):
    from mlharness.manifest.loader import load_manifest
    from mlharness.run.factory import model_file_facts

    folder = tmp_path / "saved"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "v.data").write_bytes(b"weights")
    loaded = load_manifest(str(_manifest(tmp_path, "tensorflow", "saved")), None, None)
    facts = model_file_facts(loaded, str(folder))
    assert facts["kind"] == "folder" and facts["bytes"] == 12 and len(facts["sha256"]) == 64
    (folder / "variables" / "v.data").write_bytes(b"weightz")
    assert model_file_facts(loaded, str(folder))["sha256"] != facts["sha256"]  # a changed file changes it


def test_a_keras_file_runs_and_tensorflow_start_up_lines_stay_out(run_cli, tmp_path):
    script = (
        "import sys, numpy as np, tensorflow as tf\n"
        "from tests.helpers.framework_models import W, B\n"
        "x = tf.keras.Input((4,), name='x'); d = tf.keras.layers.Dense(3, name='y'); m = tf.keras.Model(x, d(x))\n"
        "d.set_weights([W, B]); m.save(sys.argv[1])\n")
    made = subprocess.run([sys.executable, "-c", script, str(tmp_path / "affine.keras")], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[1])
    assert made.returncode == 0, made.stderr
    manifest = _manifest(tmp_path, "tensorflow", "affine.keras")
    proc = run_cli("run", "--manifest", str(manifest), "--output", str(tmp_path / "out"), *QUICK)
    assert proc.returncode == 0, proc.stderr
    for noise in ("oneDNN", "absl::InitializeLog", "cpu_feature_guard", "GraphDef"):
        assert noise not in proc.stderr, proc.stderr
    md = json.loads((tmp_path / "out" / "mlharness_run.json").read_text())
    assert md["predictor"]["kind"] == "Keras model" and md["samples"]["completed"] >= 8

    from mlharness.predictors.base import PredictorConfig
    from mlharness.predictors.tensorflow import TensorFlowPredictor

    p = TensorFlowPredictor(PredictorConfig(model_path=str(tmp_path / "affine.keras"), input_names=["x"],
                                            output_names=["y"], device="cpu", threads=1))
    p.load()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(p.predict([x])[0], expected(x), rtol=1e-5)
    assert [(t.name, t.element_type, t.shape) for t in p.output_tensors()] == [("y", "float32", [None, 3])]
    p.close()


def test_transformers_progress_bars_are_off_unless_the_user_set_them():
    check = ("import os\nfrom mlharness.predictors.transformers import quiet_progress_bars\n"
             "quiet_progress_bars()\nfrom transformers.utils import logging\n"
             "print(logging.is_progress_bar_enabled())\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    off = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, env=env)
    kept = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120,
                          env={**env, "HF_HUB_DISABLE_PROGRESS_BARS": "0"})
    assert (off.stdout.strip(), kept.stdout.strip()) == ("False", "True"), off.stderr + kept.stderr


class _Sut:
    issued = 40
    completed = 12


def test_a_piped_run_prints_a_progress_line_within_its_first_seconds(monkeypatch):
    from rich.console import Console

    from mlharness import progress

    monkeypatch.delenv(progress.INTERVAL_ENV, raising=False)
    sink = io.StringIO()
    rp = progress.RunProgress(Console(file=sink, width=200), live=True)
    assert rp.lines and rp.interval_s == 30.0
    rp.attach(_Sut(), 40)
    deadline = time.monotonic() + 20  # the first line is due after 5 s; a busy host gets slack
    while "progress:" not in sink.getvalue() and time.monotonic() < deadline:
        time.sleep(0.2)
    rp.close()
    assert "progress: 12 / 40 samples completed (30%)" in sink.getvalue()
    assert rp.first_line_s() == 5.0


def test_piped_tables_are_as_wide_as_their_content(capsys):
    from rich.table import Table

    from mlharness.progress import output_console

    console = output_console()
    table = Table(show_header=False, box=None)
    table.add_row("result", "VALID")
    table.add_row("submittable", "no: " + "x" * 60)
    console.print(table)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0] == " result       VALID"
    assert all(not line.endswith(" ") for line in lines)
    assert max(len(line) for line in lines) < 90


def test_a_built_in_dataset_hook_fails_at_its_own_file_and_line(run_cli, cli_env, tmp_path):
    stand_in = tmp_path / "stand_in.onnx"
    stand_in.write_bytes(b"not read")
    env = {**cli_env, "MLHARNESS_MODEL_FILE": str(stand_in)}
    proc = run_cli("run", "--manifest", str(HISTORICAL), "--dataset", "files", "--output", str(tmp_path / "out"),
                   *QUICK, env=env)
    text = FILES_DATASET.read_text().splitlines()
    file_line = next(k for k, t in enumerate(text, 1) if "the files dataset needs --dataset-path" in t)
    assert proc.returncode == 2, proc.stderr
    assert f"hook 'init' of {FILES_DATASET.resolve()}, line " in proc.stderr
    assert f"file line {file_line})" in proc.stderr
    error = proc.stderr[proc.stderr.index("error:"):]  # (the first line names what the run loads)
    assert str(HISTORICAL) not in error


def test_the_first_line_waits_longer_for_a_long_run():
    from mlharness.calibration.estimate import Estimate
    from mlharness.progress import RunProgress

    rp = RunProgress(live=False, interval_s=30.0)
    rp._estimate = Estimate("Offline", "performance", 1, 10, 100.0, "x", False)
    assert rp.first_line_s() == 10.0
