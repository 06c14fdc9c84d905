"""Remote agents over the Open Inference Protocol (KServe v2 gRPC), end to end on loopback.

Agents are real ``mlharness agent serve`` processes on 127.0.0.1 with port 0 (each prints the port it bound);
runs go through the real CLI and the real LoadGen. Every process a test starts is stopped by that test or its
fixture. The interoperability test needs Seldon MLServer, which cannot share this environment (it pins
protobuf < 7): it runs when ``$MLHARNESS_MLSERVER`` names an ``mlserver`` executable (e.g. from a separate
virtual environment: ``python -m venv /opt/mlserver && /opt/mlserver/bin/pip install mlserver==1.7.1``) or one is
on PATH, and is skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")

from mlharness.agent.batching import Batcher  # noqa: E402 - after the importorskip
from mlharness.agent.tensors import from_raw, to_raw  # noqa: E402
from mlharness.errors import AgentError  # noqa: E402

# Short runs: SingleStream/MultiStream/Offline in accuracy mode, Server and Offline in short performance mode.
SERVER_PERF = ["--mode", "performance", "--min-duration-ms", "500", "--min-query-count", "50", "--target-qps", "200",
               "--target-latency-ms", "200"]
OFFLINE_PERF = ["--mode", "performance", "--min-duration-ms", "200", "--min-query-count", "100", "--target-qps",
                "50000"]
SS_PERF = ["--mode", "performance", "--min-duration-ms", "300", "--min-query-count", "32", "--target-latency-ms",
           "0.01"]

ECHO_LABELS = """\
# The identity model (echo predictor) fed the label itself: 100% top-1 when every sample makes the round trip.
name: echo_labels
framework: {{name: echo, options: {{sleep_ms: {sleep_ms}}}}}
inputs: [{{name: label, element_type: int64, shape: [1]}}]
outputs: [{{name: label, element_type: int64, shape: [1]}}]
dataset: demo_images
response: {{element_type: float32}}
accuracy: {{metric: imagenet_top1, options: {{val_map: val_map.txt}}}}
batching: {{max_batchsize: 8}}
preprocess: |
  import numpy as np
  from mlharness.tasks.demo import dataset as demo

  def preprocess(ctx, index):
      return np.array([demo.demo_label(index)], dtype=np.int64)
postprocess: |
  import numpy as np

  def postprocess(ctx, outputs):
      return outputs[0].reshape(-1).astype(np.float32)
"""

REMOTE_DEMO = """\
name: demo_remote
framework:
  name: remote
  options: {options}
inputs: [{{name: image, element_type: {dtype}, shape: {shape}}}]
outputs: [{{name: label, element_type: int64}}]
dataset: demo_images
response: {{element_type: float32}}
accuracy: {{metric: imagenet_top1, options: {{val_map: val_map.txt}}}}
batching: {{max_batchsize: 1, Offline: 32}}
preprocess: |
  from mlharness.tasks.demo import dataset as demo

  def preprocess(ctx, index):
      return demo.preprocess_demo(LOADED[index], layout="NCHW")
postprocess: |
  import numpy as np

  def postprocess(ctx, outputs):
      return outputs[0].astype(np.float32)
"""


class Proc:
    """A server process whose merged output is collected line by line, so tests can wait for a message."""

    def __init__(self, cmd: list[str], env: dict[str, str], ready: str, timeout: float = 90, cwd: Path | None = None):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     cwd=cwd)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.ready_pattern, self.ready_timeout = ready, timeout
        self.address = ""

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def count(self, pattern: str) -> int:
        with self._cond:
            return sum(1 for line in self.lines if re.search(pattern, line))

    def wait_for(self, pattern: str, timeout: float, count: int = 1) -> re.Match:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hits = [m for line in self.lines if (m := re.search(pattern, line))]
                if len(hits) >= count:
                    return hits[count - 1]
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"no '{pattern}' (x{count}) from {self.proc.args}:\n{''.join(self.lines)}")
                self._cond.wait(min(left, 0.2))

    def started(self, group: int = 1) -> Proc:
        self.address = f"127.0.0.1:{self.wait_for(self.ready_pattern, self.ready_timeout).group(group)}"
        return self

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, MLHARNESS_CACHE=str(cache), **extra)
    env.pop("MLHARNESS_DEMO_DIR", None)
    for key in ("MLHARNESS_AGENT_TOKEN", "MLHARNESS_AGENT_TLS_CA"):
        if key not in extra:
            env.pop(key, None)
    return env


def agent(cache: Path, *args: str, env: dict[str, str] | None = None) -> Proc:
    cmd = [sys.executable, "-m", "mlharness.cli", "-vv", "agent", "serve", "--port", "0", *args]
    return Proc(cmd, env or _env(cache), r"listening on 127\.0\.0\.1:(\d+)")


def _responses(out: Path) -> dict[int, str]:
    return {e["qsl_idx"]: e["data"] for e in json.loads((out / "mlperf_log_accuracy.json").read_text())}


def _meta(out: Path) -> dict:
    return json.loads((out / "mlharness_run.json").read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- in-process: the batcher, the tensor codec, graceful stop and deadlines ------------------------------------


def test_batcher_merges_concurrent_requests_and_splits_large_ones():
    batches: list[int] = []

    def run(inputs):
        if (inputs[0] < 0).any():
            raise ValueError("negative sample")
        batches.append(len(inputs[0]))
        return [inputs[0] * 2, [b"r%d" % v for v in inputs[0].ravel()]]

    b = Batcher(run, max_batchsize=8, max_wait_s=2.0, workers=1)
    try:
        results: dict[int, list] = {}
        threads = [threading.Thread(target=lambda k=k: results.__setitem__(k, b.submit([np.full((2, 1), k)])))
                   for k in range(4)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert batches == [8] and time.monotonic() - t0 < 1.5  # a full batch runs without waiting out 2 s
        for k in range(4):
            assert results[k][0].ravel().tolist() == [2 * k, 2 * k] and results[k][1] == [b"r%d" % k] * 2
    finally:
        b.close()
    batches.clear()
    b = Batcher(run, max_batchsize=8, max_wait_s=0.0, workers=2)
    try:
        out = b.submit([np.arange(20).reshape(20, 1)])  # larger than a batch: cut, run, put back in order
        assert sorted(batches) == [4, 8, 8] and out[0].ravel().tolist() == list(range(0, 40, 2))
        assert out[1] == [b"r%d" % v for v in range(20)]
        with pytest.raises(ValueError, match="negative sample"):
            b.submit([np.full((3, 1), -1)])
    finally:
        b.close()
    with pytest.raises(AgentError, match="shutting down"):
        b.submit([np.zeros((1, 1))])


def test_batcher_runs_a_lone_request_on_the_caller_thread():
    seen: list[str] = []
    b = Batcher(lambda x: seen.append(threading.current_thread().name) or [x[0]], max_batchsize=4)
    try:
        assert b.submit([np.ones((2, 3))])[0].shape == (2, 3)
        assert seen == [threading.current_thread().name]
    finally:
        b.close()


def test_tensor_codec_round_trips():
    for arr in (np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[1], [-2]], dtype=np.int64),
                np.array([True, False]), np.ones((2, 2), dtype=np.float16)):
        datatype, shape, raw = to_raw(arr)
        back = from_raw(datatype, shape, raw, "t")
        assert back.dtype == arr.dtype and np.array_equal(back, arr)
    datatype, shape, raw = to_raw([b"", b"abc", bytes(300)])
    assert (datatype, shape) == ("BYTES", [3]) and list(from_raw(datatype, shape, raw, "t")) == [b"", b"abc",
                                                                                                 bytes(300)]
    with pytest.raises(AgentError, match="bytes of raw contents") as e:
        from_raw("FP32", [2, 2], b"x" * 12, "input 'x'")
    assert e.value.status == "INVALID_ARGUMENT"
    with pytest.raises(AgentError, match="complex64 cannot be sent"):
        to_raw(np.zeros(2, dtype=np.complex64))


def _echo_request(n: int):
    from mlharness.agent.protos import grpc_predict_v2_pb2 as pb

    request = pb.ModelInferRequest(model_name="echo_labels")
    datatype, shape, raw = to_raw(np.arange(n, dtype=np.int64).reshape(n, 1))
    request.inputs.add(name="label", datatype=datatype, shape=shape)
    request.raw_input_contents.append(raw)
    return request


def test_graceful_stop_finishes_in_flight_requests(tmp_path, shared_cache, monkeypatch):
    from mlharness.agent.client import AgentPool, ConnectOptions
    from mlharness.agent.server import AgentConfig, AgentServer

    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    server = AgentServer(AgentConfig(manifest=str(_echo_manifest(tmp_path, 400)), port=0))
    address = f"127.0.0.1:{server.start()}"
    pool = AgentPool([address], ConnectOptions(deadline_s=10))
    stopper = threading.Thread(target=server.stop, args=(10,))
    try:
        pool.connect("echo_labels")
        result: dict = {}
        inflight = threading.Thread(target=lambda: result.update(r=pool.infer(_echo_request(3))))
        inflight.start()
        time.sleep(0.15)  # the request is now sleeping in the echo predictor
        stopper.start()
        time.sleep(0.1)
        with pytest.raises(AgentError) as e:  # new requests are refused while the in-flight one finishes
            AgentPool([address], ConnectOptions(connect_timeout_s=2)).connect("echo_labels")
        assert e.value.status == "UNAVAILABLE"
        inflight.join(10)
        raw = result["r"].raw_output_contents[0]
        assert from_raw("INT64", [3, 1], raw, "label").ravel().tolist() == [0, 1, 2]
    finally:
        pool.close()
        if not stopper.is_alive():
            server.stop(0)
        stopper.join(20)


def test_a_hung_agent_hits_the_deadline(tmp_path, shared_cache, monkeypatch):
    from mlharness.agent.client import AgentPool, ConnectOptions
    from mlharness.agent.server import AgentConfig, AgentServer

    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    server = AgentServer(AgentConfig(manifest=str(_echo_manifest(tmp_path, 1500)), port=0))
    pool = AgentPool([f"127.0.0.1:{server.start()}"], ConnectOptions(deadline_s=0.3))
    try:
        pool.connect("echo_labels")
        t0 = time.monotonic()
        with pytest.raises(AgentError, match="DEADLINE_EXCEEDED|Deadline Exceeded") as e:
            pool.infer(_echo_request(1))
        assert time.monotonic() - t0 < 1.2 and e.value.status == "UNAVAILABLE"  # no live agent left
        assert pool.agents[0].alive is False
    finally:
        pool.close()
        server.stop(0)


# -- end to end through the CLI --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_demo(shared_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's Offline accuracy run without agents: what every remote run must reproduce byte for byte."""
    out = tmp_path_factory.mktemp("local") / "acc"
    proc = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--scenario", "Offline", "--output",
                           str(out), "--no-progress"], capture_output=True, text=True, timeout=120,
                          env=_env(shared_cache))
    assert proc.returncode == 0, proc.stderr
    assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=256, total=256\n"
    return out


@pytest.fixture(scope="module")
def demo_agents(shared_cache: Path):
    """Three demo agents (--hooks harness), started side by side; the first one also serves single-agent tests."""
    procs = [agent(shared_cache, "--max-wait-ms", "1") for _ in range(3)]
    try:
        yield [p.started() for p in procs]
    finally:
        codes = [p.stop() for p in procs]
    assert codes == [0, 0, 0]  # SIGTERM is a clean, graceful stop



@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["SingleStream", "MultiStream", "Offline"])
def test_one_agent_accuracy_equals_local(run_cli, tmp_path, demo_agents, local_demo, scenario):
    out = tmp_path / "acc"
    proc = run_cli("run", "--scenario", scenario, "--agent", demo_agents[0].address, "--output", str(out),
                   "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert (out / "accuracy.txt").read_text() == (local_demo / "accuracy.txt").read_text()
    assert _responses(out) == _responses(local_demo)  # the same bytes, sample by sample
    meta = _meta(out)
    assert meta["framework"]["name"] == "remote" and meta["predictor"]["predictor"] == "remote"
    assert meta["samples"]["issued"] == meta["samples"]["completed"] == 256


@pytest.mark.slow
def test_one_agent_server_performance(run_cli, tmp_path, demo_agents):
    out = tmp_path / "perf"
    proc = run_cli("run", "--scenario", "Server", "--agent", demo_agents[0].address, "--output", str(out),
                   "--no-progress", "--workers", "2", *SERVER_PERF)
    assert proc.returncode == 0, proc.stderr
    meta = _meta(out)
    assert meta["result"]["metric_value"] > 0
    assert meta["samples"]["issued"] == meta["samples"]["completed"] >= 50


@pytest.mark.slow
def test_three_agents_share_the_load(run_cli, tmp_path, demo_agents, local_demo):
    agents = [a for p in demo_agents for a in ("--agent", p.address)]
    out = tmp_path / "acc"
    proc = run_cli("run", "--scenario", "Offline", "--max-batchsize", "8", "--workers", "3", *agents,
                   "--output", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert _responses(out) == _responses(local_demo)
    served = [a["requests"] for a in _meta(out)["predictor"]["agents"]]
    assert len(served) == 3 and all(n > 0 for n in served) and sum(served) >= 256 // 8, served
    perf = tmp_path / "perf"
    proc = run_cli("run", "--scenario", "Offline", *agents, "--workers", "3", "--output", str(perf),
                   "--no-progress", *OFFLINE_PERF)
    assert proc.returncode == 0, proc.stderr
    assert _meta(perf)["result"]["valid"] is True


@pytest.mark.slow
def test_agent_info_and_metadata_checks(run_cli, tmp_path, demo_agents):
    address = demo_agents[0].address
    proc = run_cli("agent", "info", address, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["server"]["name"] == "mlharness-agent" and info["ready"] is True
    assert info["model"]["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert info["model"]["outputs"] == [{"name": "label", "datatype": "INT64", "shape": [-1]}]

    cases = {  # manifest options / inputs -> what the error must say; all fail before LoadGen starts
        "name": ({"agents": [address], "model_name": "resnet"}, "float32", [3, 32, 32], "'resnet' is not ready"),
        "shape": ({"agents": [address], "model_name": "demo"}, "float32", [3, 16, 16], "has shape [-1, 3, 32, 32]"),
        "dtype": ({"agents": [address], "model_name": "demo"}, "float16", [3, 32, 32], "is FP32"),
        "unreachable": ({"agents": [f"127.0.0.1:{_free_port()}"], "model_name": "demo"}, "float32", [3, 32, 32],
                        "UNAVAILABLE"),
    }
    for case, (options, dtype, shape, message) in cases.items():
        manifest = tmp_path / f"{case}.yaml"
        manifest.write_text(REMOTE_DEMO.format(options=json.dumps(options), dtype=dtype, shape=shape))
        out = tmp_path / case
        t0 = time.monotonic()
        proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--output", str(out),
                       "--no-progress", timeout=60)
        assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, (case, proc.stderr)
        assert not (out / "mlperf_log_summary.txt").exists() and time.monotonic() - t0 < 30
    # LoadGen over the network needs agents that run the hooks
    proc = run_cli("run", "--scenario", "Offline", "--network", "lon", "--sut-server", address, "--no-progress",
                   "--output", str(tmp_path / "lon"))
    assert proc.returncode == 2 and "--hooks agent" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_network_lon_accuracy_and_server(run_cli, tmp_path, shared_cache, local_demo):
    lon_agent = agent(shared_cache, "--hooks", "agent").started()
    try:
        out = tmp_path / "acc"
        proc = run_cli("run", "--scenario", "Offline", "--network", "lon", "--sut-server", lon_agent.address,
                       "--output", str(out), "--no-progress")
        assert proc.returncode == 0, proc.stderr
        assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=256, total=256\n"
        assert _responses(out) == _responses(local_demo)
        detail = (out / "mlperf_log_detail.txt").read_text()
        assert re.search(r'"key": "sut_name", "value": "[^"]*Network SUT', detail)
        # the LoadGen node did no pre-processing: the agent loaded (pre-processed) the samples
        assert lon_agent.count(r"loaded 256 samples") == 1
        perf = tmp_path / "perf"
        proc = run_cli("run", "--scenario", "Server", "--network", "lon", "--sut-server", lon_agent.address,
                       "--output", str(perf), "--no-progress", *SERVER_PERF)
        assert proc.returncode == 0, proc.stderr
        assert _meta(perf)["samples"]["issued"] == _meta(perf)["samples"]["completed"] >= 50
    finally:
        assert lon_agent.stop() == 0


def _echo_manifest(tmp_path: Path, sleep_ms: int) -> Path:
    path = tmp_path / f"echo_labels_{sleep_ms}.yaml"
    path.write_text(ECHO_LABELS.format(sleep_ms=sleep_ms))
    return path


@pytest.mark.slow
def test_killing_one_of_two_agents_mid_run(tmp_path, shared_cache):
    manifest = _echo_manifest(tmp_path, 40)
    victim, survivor = (agent(shared_cache, "--manifest", str(manifest)) for _ in range(2))
    try:
        victim.started()
        survivor.started()
        out = tmp_path / "acc"
        run = subprocess.Popen([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest),
                                "--scenario", "Offline", "--workers", "4", "--agent", victim.address, "--agent",
                                survivor.address, "--output", str(out), "--no-progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(shared_cache))
        victim.wait_for(r"ModelInfer: \d+ samples", timeout=60, count=5)  # past the warm-up, in the timed run
        victim.proc.kill()
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 0, stderr
        assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=256, total=256\n"
        meta = _meta(out)
        assert meta["samples"]["issued"] == meta["samples"]["completed"] == 256
        agents = {a["address"]: a for a in meta["predictor"]["agents"]}
        assert agents[victim.address]["alive"] is False and agents[survivor.address]["alive"] is True
        assert "sending its requests to the other agents" in stderr
    finally:
        victim.stop()
        survivor.stop()


@pytest.mark.slow
def test_killing_the_only_agent_fails_fast(tmp_path, shared_cache):
    manifest = _echo_manifest(tmp_path, 100)
    only = agent(shared_cache, "--manifest", str(manifest)).started()
    try:
        out = tmp_path / "acc"
        run = subprocess.Popen([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest),
                                "--scenario", "Offline", "--workers", "2", "--agent", only.address,
                                "--output", str(out), "--no-progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(shared_cache))
        only.wait_for(r"ModelInfer: \d+ samples", timeout=60, count=5)
        only.proc.kill()
        t0 = time.monotonic()
        stdout, stderr = run.communicate(timeout=60)
        assert time.monotonic() - t0 < 20  # well within the 60 s request deadline: no hang
        assert run.returncode == 3, (stdout, stderr)
        assert "no live agent left" in stderr and only.address in stderr and "Traceback" not in stderr
        assert not (out / "accuracy.txt").exists()
    finally:
        only.stop()


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)

    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.mark.slow
def test_tls_and_token(run_cli, tmp_path, shared_cache):
    pytest.importorskip("cryptography")
    cert, key = _self_signed(tmp_path)
    secure = agent(shared_cache, "--tls-cert", str(cert), "--tls-key", str(key), "--token", "s3cret").started()
    try:
        no_token = tmp_path / "no_token.yaml"
        no_token.write_text(REMOTE_DEMO.format(
            options=json.dumps({"agents": [secure.address], "model_name": "demo", "tls_ca": str(cert)}),
            dtype="float32", shape=[3, 32, 32]))
        proc = run_cli("run", "--manifest", str(no_token), "--scenario", "Offline", "--count", "32",
                       "--output", str(tmp_path / "refused"), "--no-progress")
        assert proc.returncode == 2 and "UNAUTHENTICATED" in proc.stderr, proc.stderr
        proc = run_cli("agent", "info", secure.address, "--tls-ca", str(cert), "--token", "wrong")
        assert proc.returncode == 2 and "UNAUTHENTICATED" in proc.stderr, proc.stderr
        # the token and CA from the environment, as with --agent
        env = _env(shared_cache, MLHARNESS_AGENT_TOKEN="s3cret", MLHARNESS_AGENT_TLS_CA=str(cert))
        out = tmp_path / "acc"
        proc = run_cli("run", "--scenario", "Offline", "--count", "32", "--agent", secure.address, "--output",
                       str(out), "--no-progress", env=env)
        assert proc.returncode == 0, proc.stderr
        assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=32, total=32\n"
        proc = run_cli("agent", "info", secure.address, "--tls-ca", str(cert), "--token", "s3cret", "--json")
        assert proc.returncode == 0 and json.loads(proc.stdout)["model"]["name"] == "demo", proc.stderr
    finally:
        assert secure.stop() == 0


MLSERVER_RUNTIME = """\
import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class NearestColour(MLModel):
    # the demo's classifier written for MLServer: nearest class colour to the image's mean colour
    async def load(self) -> bool:
        self.centres = np.asarray(self.settings.parameters.extra["centres"], dtype=np.float32)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32)
        mean = x.reshape(x.shape[0], x.shape[1], -1).mean(axis=2)
        label = ((mean[:, None, :] - self.centres[None]) ** 2).sum(axis=2).argmin(axis=1).astype(np.int64)
        return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output("label", label)])
"""


def _mlserver() -> str | None:
    exe = os.environ.get("MLHARNESS_MLSERVER") or shutil.which("mlserver")
    return exe if exe and Path(exe).is_file() else None


@pytest.mark.slow
def test_interop_with_mlserver(run_cli, tmp_path, shared_cache, local_demo):
    exe = _mlserver()
    if exe is None:
        pytest.skip("Seldon MLServer not found: set $MLHARNESS_MLSERVER to an mlserver executable (it pins "
                    "protobuf<7, so it lives in its own virtual environment)")
    from mlharness.tasks.demo import dataset as demo

    repo = tmp_path / "mlserver"
    (repo / "demo").mkdir(parents=True)
    (repo / "demo" / "runtime.py").write_text(MLSERVER_RUNTIME)
    centres = (demo.DEMO_COLORS.astype(np.float32) / np.float32(255.0) - np.float32(demo.DEMO_MEAN)).tolist()
    (repo / "demo" / "model-settings.json").write_text(json.dumps({
        "name": "demo", "implementation": "runtime.NearestColour", "parameters": {"extra": {"centres": centres}},
        "inputs": [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 32, 32]}],
        "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}]}))
    grpc_port = _free_port()
    (repo / "settings.json").write_text(json.dumps({
        "host": "127.0.0.1", "http_port": _free_port(), "grpc_port": grpc_port, "metrics_endpoint": None,
        "parallel_workers": 0, "debug": False}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    server = Proc([exe, "start", str(repo)], env, r"gRPC server running on \S+:(\d+)", timeout=120, cwd=repo)
    try:
        server.started()
        assert server.address == f"127.0.0.1:{grpc_port}"
        manifest = tmp_path / "remote.yaml"
        manifest.write_text(REMOTE_DEMO.format(
            options=json.dumps({"agents": [server.address], "model_name": "demo", "deadline_s": 30}),
            dtype="float32", shape=[3, 32, 32]))
        out = tmp_path / "acc"
        proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--output", str(out),
                       "--no-progress")
        assert proc.returncode == 0, proc.stderr
        assert _responses(out) == _responses(local_demo)
        assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=256, total=256\n"
        perf = tmp_path / "perf"
        proc = run_cli("run", "--manifest", str(manifest), "--scenario", "SingleStream", "--output", str(perf),
                       "--no-progress", *SS_PERF)
        assert proc.returncode == 0, proc.stderr
        meta = _meta(perf)
        assert meta["result"]["valid"] is True and meta["samples"]["issued"] == meta["samples"]["completed"]
        assert meta["predictor"]["agents"][0]["server"].startswith("mlserver ")
    finally:
        server.stop()
