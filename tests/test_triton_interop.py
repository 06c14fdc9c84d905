"""mlharness's remote predictor against a real NVIDIA Triton Inference Server (the binary PyTriton ships).

Triton serves the demo and ResNet50-oracle ONNX models (tests/helpers/triton_serve.py, ONNX Runtime behind
Triton's dynamic batcher) on 127.0.0.1; ``mlharness run --agent`` drives them through the real LoadGen in all
four scenarios and in accuracy mode. PyTriton pins numpy<2, so it lives in a virtual environment of its own
(``python -m venv .ci-triton && .ci-triton/bin/pip install nvidia-pytriton==0.7.0 onnxruntime``): the tests
run when ``$MLHARNESS_TRITON_PYTHON`` names that environment's Python, and skip otherwise or when Triton
cannot start.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("grpc")
pytestmark = pytest.mark.slow

HELPER = Path(__file__).parent / "helpers" / "triton_serve.py"
READY = re.compile(r"triton grpc listening on (127\.0\.0\.1:\d+), http on (127\.0\.0\.1:\d+)")
STARTUP_S = 120
N_IMAGES = 32
# short performance runs: every sample must complete; VALID is not required
PERF = {
    "SingleStream": ["--min-query-count", "64", "--target-latency-ms", "5"],
    "MultiStream": ["--min-query-count", "16", "--target-latency-ms", "20"],
    "Server": ["--min-query-count", "64", "--target-qps", "100", "--target-latency-ms", "200",
               "--no-calibrate"],
    "Offline": ["--min-query-count", "256", "--target-qps", "2000"],
}


class Server:
    """A server process whose output is collected line by line; ``address`` is set once it prints READY."""

    def __init__(self, cmd: list[str], env: dict[str, str], ready: re.Pattern, cwd: Path | None = None):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env, cwd=cwd)
        self.lines: list[str] = []
        self.ready = ready
        self._seen = threading.Event()
        self.address = ""
        self.http = ""  # Triton's HTTP endpoint (statistics, model configuration)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.append(line)
            m = self.ready.search(line)
            if m and not self.address:
                self.address = m.group(1)
                self.http = m.group(2) if m.re.groups > 1 else ""
                self._seen.set()
        self._seen.set()  # the process ended

    def wait_ready(self, timeout: float) -> bool:
        self._seen.wait(timeout)
        return bool(self.address)

    def output(self) -> str:
        return "".join(self.lines[-40:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def _triton_python() -> str | None:
    exe = os.environ.get("MLHARNESS_TRITON_PYTHON")
    return exe if exe and Path(exe).is_file() else None


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path):
    """A Triton server with the demo ('demo') and the ResNet50 oracle ('resnet50-oracle') loaded."""
    exe = _triton_python()
    if exe is None:
        pytest.skip("Triton Inference Server not available: set $MLHARNESS_TRITON_PYTHON to the Python of a "
                    "virtual environment with nvidia-pytriton and onnxruntime (PyTriton pins numpy<2; see "
                    ".ci/run)")
    from mlharness.tasks.demo.models import ensure_demo_model
    from mlharness.tasks.imagenet.models import ensure_oracle_model

    root = tmp_path_factory.mktemp("triton")
    demo, oracle = ensure_demo_model(root / "demo.onnx"), ensure_oracle_model(root / "resnet50_oracle.onnx")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    log = root / "triton.log"
    server = Server([exe, str(HELPER), "--workspace", str(root / "workspace"), "--log-file", str(log),
                     "--demo", str(demo), "--oracle", str(oracle), "--max-batch-size", "64"], env, READY,
                    cwd=root)
    try:
        if not server.wait_ready(STARTUP_S):
            server.stop()
            tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
            pytest.skip(f"Triton Inference Server did not start within {STARTUP_S} s with {exe}:\n"
                        f"{server.output()}{tail}")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def own_agent(triton: Server, shared_cache: Path):
    """mlharness's own agent serving the demo, for the three-way comparison."""
    env = dict(os.environ, MLHARNESS_CACHE=str(shared_cache))
    env.pop("MLHARNESS_DEMO_DIR", None)
    agent = Server([sys.executable, "-m", "mlharness.cli", "agent", "serve", "--port", "0", "--max-wait-ms",
                    "1"], env, re.compile(r"listening on (127\.0\.0\.1:\d+)"))
    try:
        assert agent.wait_ready(90), agent.output()
        yield agent
    finally:
        assert agent.stop() == 0, agent.output()


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlharness.tasks.imagenet import synth

    return synth.write_synthetic_imagenet(tmp_path_factory.mktemp("imagenet") / "val", N_IMAGES)


def _run(run_cli, out: Path, *args: str) -> dict:
    proc = run_cli("run", *args, "--output", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (out / "mlperf_log_summary.txt").is_file()
    return json.loads((out / "mlharness_run.json").read_text())


def _accuracy_log(out: Path) -> dict[int, str]:
    """Each sample's response bytes (hex), by qsl_idx: LoadGen writes the log in completion order, which differs
    between a local run and one through a server whenever batches finish out of order."""
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    by_sample = {e["qsl_idx"]: e["data"] for e in entries}
    assert len(by_sample) == len(entries)  # each sample once
    return by_sample


def test_demo_accuracy_through_triton_equals_local_and_own_agent(run_cli, tmp_path, triton, own_agent):
    local = tmp_path / "local"
    _run(run_cli, local, "--scenario", "Offline")
    assert (local / "accuracy.txt").read_text() == "accuracy=100.000%, good=256, total=256\n"
    for name, server in (("triton", triton), ("agent", own_agent)):
        out = tmp_path / name
        meta = _run(run_cli, out, "--scenario", "Offline", "--agent", server.address)
        assert meta["framework"]["name"] == "remote"
        assert meta["samples"]["issued"] == meta["samples"]["completed"] == 256
        assert (out / "accuracy.txt").read_text() == (local / "accuracy.txt").read_text(), name
        assert _accuracy_log(out) == _accuracy_log(local), name  # the same response bytes, sample by sample
    served = _run(run_cli, tmp_path / "ss", "--scenario", "SingleStream", "--count", "64", "--agent",
                  triton.address)["predictor"]["agents"][0]
    assert served["server"].startswith("triton ") and served["requests"] >= 64, served


def _triton_json(triton: Server, path: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://{triton.http}{path}", timeout=10) as r:
        return json.loads(r.read())


def _demo_counts(triton: Server) -> tuple[int, int]:
    """(samples inferred, model executions) of the demo model so far, from Triton's statistics."""
    stats = _triton_json(triton, "/v2/models/demo/stats")["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


@pytest.mark.parametrize("scenario", ["SingleStream", "MultiStream", "Server", "Offline"])
def test_demo_performance_through_triton(run_cli, tmp_path, triton, scenario):
    config = _triton_json(triton, "/v2/models/demo/config")
    assert config["max_batch_size"] == 64 and "dynamic_batching" in config
    before = _demo_counts(triton)
    out = tmp_path / scenario
    meta = _run(run_cli, out, "--scenario", scenario, "--agent", triton.address, "--mode", "performance",
                "--min-duration-ms", "300", *PERF[scenario])
    samples = meta["samples"]
    assert samples["issued"] == samples["completed"] > 0, samples
    assert meta["result"]["metric_value"] > 0 and meta["predictor"]["agents"][0]["alive"] is True
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert f"Scenario : {scenario}" in summary and "90.00 percentile latency (ns)" in summary
    inferred, executions = (a - b for a, b in zip(_demo_counts(triton), before, strict=True))
    assert inferred >= samples["completed"]  # every sample went through Triton (plus any warm-up)
    if scenario in ("MultiStream", "Offline"):  # queries of 8 / batches of 32 samples: one execution each
        assert inferred >= 4 * executions, (inferred, executions)  # (a few small warm-up batches aside)


def test_resnet50_oracle_scores_100_percent_through_triton(run_cli, tmp_path, triton, imagenet):
    args = ("--manifest", "resnet50-oracle", "--dataset-path", str(imagenet), "--scenario", "Offline")
    remote = tmp_path / "triton"
    meta = _run(run_cli, remote, *args, "--agent", triton.address)
    assert (remote / "accuracy.txt").read_text() == f"accuracy=100.000%, good={N_IMAGES}, total={N_IMAGES}\n"
    assert meta["samples"]["completed"] == N_IMAGES
    local = tmp_path / "local"
    _run(run_cli, local, *args)
    assert _accuracy_log(remote) == _accuracy_log(local)
    # MultiStream: queries of 8 samples, each request asking for both outputs (ArgMax:0 and the softmax)
    _run(run_cli, tmp_path / "ms", *args[:-1], "MultiStream", "--agent", triton.address)
    assert (tmp_path / "ms" / "accuracy.txt").read_text() == (remote / "accuracy.txt").read_text()
    assert _accuracy_log(tmp_path / "ms") == _accuracy_log(local)


def test_triton_metadata_and_wrong_model_fail_before_loadgen(run_cli, tmp_path, triton, own_agent):
    import yaml

    from mlharness.paths import MANIFESTS_DIR

    proc = run_cli("agent", "info", triton.address, "--model", "resnet50-oracle", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["server"]["name"] == "triton" and info["model"]["ready"] is True
    assert info["model"]["inputs"] == [{"name": "input_tensor:0", "datatype": "FP32",
                                        "shape": [-1, 3, 224, 224]}]
    assert [o["name"] for o in info["model"]["outputs"]] == ["ArgMax:0", "softmax_tensor:0"]
    demo = yaml.safe_load((MANIFESTS_DIR / "demo" / "demo.yaml").read_text())
    demo.pop("model")
    cases = {  # options -> what the error says; each fails at load, before LoadGen starts
        "oracle": (triton, {"model_name": "resnet50-oracle"}, "no input 'image' (it serves: input_tensor:0)"),
        "missing": (triton, {"model_name": "missing"}, "model 'missing' is not ready there"),
        # Triton serves version 1 only; the version is checked at load, not at the first inference
        "version": (triton, {"model_name": "demo", "model_version": "2"},
                    "model 'demo' version '2' is not ready there (is it the model name and version"),
        "agent_version": (own_agent, {"model_name": "demo", "model_version": "7"},
                          "model 'demo' version '7' is not ready there"),
    }
    for case, (server, options, message) in cases.items():
        demo["framework"] = {"name": "remote", "options": {"agents": [server.address], **options}}
        manifest = tmp_path / f"{case}.yaml"
        manifest.write_text(yaml.safe_dump(demo))
        out = tmp_path / case
        proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--output", str(out),
                       "--no-progress")
        assert proc.returncode == 2, (case, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, (case, proc.stderr)
        assert not (out / "mlperf_log_summary.txt").exists()
    # the version Triton serves is accepted and sent with every request
    demo["framework"] = {"name": "remote", "options": {"agents": [triton.address], "model_name": "demo",
                                                       "model_version": "1"}}
    manifest = tmp_path / "version1.yaml"
    manifest.write_text(yaml.safe_dump(demo))
    _run(run_cli, tmp_path / "version1", "--manifest", str(manifest), "--scenario", "Offline", "--count",
         "64")
    assert (tmp_path / "version1" / "accuracy.txt").read_text() == "accuracy=100.000%, good=64, total=64\n"
