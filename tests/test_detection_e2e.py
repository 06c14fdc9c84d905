"""RetinaNet/OpenImages and YOLO/COCO end to end through the real CLI, LoadGen and ONNX Runtime: synthetic sets
written by ``mlharness dataset synth``, the oracles at mAP=100.000% in every scenario their benchmark has an
accuracy run in (variable-size responses, empty ones included, locally and through a remote agent), the random
models (narrow variants at a small input size) in all their scenarios, and a packaged submission tree per
benchmark that ``mlharness submission check`` passes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mlharness.manifest.loader import find_builtin
from tests.helpers.cli import cli

pytestmark = pytest.mark.slow

COUNT = 10
MAP_100 = "mAP=100.000%"
SHORT = ["--min-duration-ms", "200", "--min-query-count", "8"]
OVERRIDES = {"status": "available", "system_type": "edge", "cooling": "air", "host_memory_configuration": "1x 24 GB",
             "host_networking_topology": "N/A", "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("detection")
    out = {}
    for task in ("coco", "openimages"):
        proc = cli(env, "dataset", "synth", task, "--out", str(root / task), "--count", str(COUNT))
        assert proc.returncode == 0, proc.stderr
        out[task] = root / task
    return out


def responses(run: Path) -> dict[int, str]:
    return {e["qsl_idx"]: e["data"] for e in json.loads((run / "mlperf_log_accuracy.json").read_text())}


def round_of(manifest: str) -> list[str]:
    """RetinaNet is a benchmark of round v6.0, not of v6.1 (the default round)."""
    return ["--round", "v6.0"] if "retinanet" in str(manifest) else []


def accuracy_run(env, manifest: str, dataset: Path, out: Path, scenario: str, *extra: str) -> str:
    proc = cli(env, "run", "--manifest", manifest, "--dataset-path", str(dataset), "--scenario", scenario,
               "--mode", "accuracy", "--output", str(out), "--no-progress", *round_of(manifest), *extra)
    assert proc.returncode == 0, proc.stderr
    return (out / "accuracy.txt").read_text().splitlines()[0]


@pytest.mark.parametrize(("manifest", "task", "scenario"), [
    ("yolo-oracle", "coco", "Offline"), ("yolo-oracle", "coco", "SingleStream"),
    ("yolo-oracle", "coco", "MultiStream"),
    ("retinanet-oracle", "openimages", "Offline"), ("retinanet-oracle", "openimages", "SingleStream"),
    ("retinanet-oracle", "openimages", "MultiStream"), ("retinanet-oracle", "openimages", "Server"),
])
def test_oracle_scores_100(env, sets, tmp_path, manifest, task, scenario):
    out = tmp_path / "acc"
    extra = ["--target-qps", "50"] if scenario == "Server" else []
    assert accuracy_run(env, manifest, sets[task], out, scenario, *extra) == MAP_100
    assert "ERROR" not in (out / "accuracy.txt").read_text()  # every payload carries its own qsl_idx
    data = responses(out)
    assert sorted(data) == list(range(COUNT))
    sizes = {len(d) // 2 for d in data.values()}
    assert all(s % 28 == 0 for s in sizes) and 0 in sizes and len(sizes) >= 3  # 7 floats per box, unpadded
    # the standalone command scores the log to the same text's last line
    flag = "--coco-dir" if task == "coco" else "--openimages-dir"
    proc = cli(env, "accuracy", task, "--log", str(out / "mlperf_log_accuracy.json"), flag, str(sets[task]))
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == MAP_100, proc.stderr


@pytest.mark.parametrize("hooks", ["harness", "agent"])
def test_oracle_through_a_remote_agent_answers_the_same_bytes(env, sets, tmp_path, hooks):
    """harness: the agent runs the model, this node pre/post-processes; agent: LoadGen over the network, the
    agent runs the hooks (postprocess with the sample indices) and the model."""
    local = tmp_path / "local"
    assert accuracy_run(env, "yolo-oracle", sets["coco"], local, "MultiStream") == MAP_100
    log = tmp_path / "agent.log"
    with log.open("w") as sink:  # a file, not a pipe: the agent never blocks on output nobody reads
        agent = subprocess.Popen([sys.executable, "-m", "mlharness.cli", "agent", "serve", "--port", "0",
                                  "--manifest", "yolo-oracle", "--hooks", hooks, "--dataset-path", str(sets["coco"])],
                                 stdout=sink, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while not (m := re.search(r"listening on (\S+)", log.read_text())):
            assert agent.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        address = m.group(1)
        remote = ["--agent", address] if hooks == "harness" else ["--network", "lon", "--sut-server", address]
        for scenario in ("MultiStream", "Offline"):
            out = tmp_path / f"remote-{scenario}"
            assert accuracy_run(env, "yolo-oracle", sets["coco"], out, scenario, *remote) == MAP_100
            assert responses(out) == responses(local)  # the same variable-size bytes, sample by sample
    finally:
        agent.terminate()
        agent.wait(30)


def tiny(tmp_path: Path, base: str, size: int = 128) -> Path:
    """A built-in random manifest with the narrow model at a small input size."""
    doc = yaml.safe_load(find_builtin(base).read_text())
    doc["model"]["graph_path"] = doc["model"]["graph_path"].replace("_640.onnx", f"_tiny_{size}.onnx").replace(
        "_800.onnx", f"_tiny_{size}.onnx")
    doc["inputs"][0]["shape"] = [3, size, size]
    doc["attributes"]["input_size"] = size
    path = tmp_path / f"{base}-tiny.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(("base", "task", "scenarios"), [
    ("retinanet-random", "openimages", ("SingleStream", "MultiStream", "Offline", "Server")),
    ("yolo-random", "coco", ("SingleStream", "MultiStream", "Offline")),
])
def test_random_models_run_all_their_scenarios(env, sets, tmp_path, base, task, scenarios):
    manifest = tiny(tmp_path, base)
    for scenario in scenarios:
        out = tmp_path / scenario
        target = ["--target-qps", "5"] if scenario in ("Offline", "Server") else ["--target-latency-ms", "50"]
        proc = cli(env, "run", "--manifest", str(manifest), "--dataset-path", str(sets[task]), "--scenario",
                   scenario, "--mode", "performance", "--output", str(out), "--no-progress", *SHORT, *target,
                   *round_of(base))
        assert proc.returncode == 0, proc.stderr
        meta = json.loads((out / "mlharness_run.json").read_text())
        assert meta["samples"]["issued"] == meta["samples"]["completed"] >= 8, scenario
        assert "Result is" in (out / "mlperf_log_summary.txt").read_text()
    out = tmp_path / "accuracy"
    line = accuracy_run(env, str(manifest), sets[task], out, "Offline")
    assert line.startswith("mAP=") and float(line[4:-1]) < 5  # random weights: meaningless answers


@pytest.mark.parametrize(("manifest", "task", "benchmark"), [
    ("yolo-oracle", "coco", "yolo-99"), ("retinanet-oracle", "openimages", "retinanet"),
])
def test_submission_tree_passes_the_checker(env, sets, tmp_path, manifest, task, benchmark):
    overrides = tmp_path / "system.yaml"
    # v6.0 lists RetinaNet for datacenter,edge systems only, YOLO for edge ones too
    system_type = "datacenter,edge" if benchmark == "retinanet" else "edge"
    overrides.write_text(yaml.safe_dump({**OVERRIDES, "system_type": system_type}))
    results = tmp_path / "results"
    proc = cli(env, "submission", "run", "--manifest", manifest, "--dataset-path", str(sets[task]),
               "--scenarios", "SingleStream", "--division", "open", "--submitter", "Acme", "--system-name", "box",
               "--results", str(results), "--system-overrides", str(overrides),
               "--min-duration-ms", "200", "--min-query-count", "64", "--target-latency-ms", "50", "--threads", "1",
               *round_of(manifest), timeout=600)
    # exit 4 may only come from TEST01's comparison of two SingleStream latencies on a busy shared host
    assert proc.returncode == 0 or (proc.returncode == 4 and proc.stderr.strip().endswith(
        f"compliance audit(s) failed: {benchmark}/SingleStream TEST01 performance")), proc.stdout + proc.stderr
    scen = results / "box" / benchmark / "SingleStream"
    assert (scen / "accuracy" / "accuracy.txt").read_text().splitlines()[0] == MAP_100
    assert "TEST PASS" in (scen / "TEST01" / "verify_accuracy.txt").read_text()
    out = tmp_path / "package"
    proc = cli(env, "submission", "package", "--results", str(results), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    proc = cli(env, "submission", "check", str(out), "--allow-development", *round_of(manifest))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED: 0 problem(s)" in proc.stdout
    assert "is not a benchmark of the" not in proc.stdout  # the benchmark belongs to the system's category
