"""An agent under hostile requests, and the client's connection options and messages (loopback only).

The fuzz test sends a few hundred malformed requests of many kinds to a real ``mlharness agent serve``: each must
be answered with a client-error status, the agent's log must grow by one line per bad request at most (rate
limited: far fewer) and hold no traceback, and the agent must still answer a valid request afterwards.
"""

from __future__ import annotations

import random
import re
import sys

import numpy as np
import pytest

pytest.importorskip("grpc")

from test_agent import Proc, _echo_manifest, _env, _self_signed  # noqa: E402

from mlharness.agent.tensors import from_raw, to_raw  # noqa: E402

CLIENT_ERRORS = {"INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "OUT_OF_RANGE"}


def _agent(cache, *args: str, verbosity: str = "-v", **env: str) -> Proc:
    cmd = [sys.executable, "-m", "mlharness.cli", verbosity, "agent", "serve", "--port", "0", *args]
    return Proc(cmd, _env(cache, **env), r"listening on 127\.0\.0\.1:(\d+)").started()


VALID_INPUTS = (("label", "INT64", [2, 1], np.arange(2, dtype=np.int64).tobytes()),)


def _request(name="echo_labels", inputs=VALID_INPUTS):
    from mlharness.agent.protos import grpc_predict_v2_pb2 as pb

    r = pb.ModelInferRequest(model_name=name)
    for n, dt, shape, raw in inputs:
        r.inputs.add(name=n, datatype=dt, shape=shape)
        if raw is not None:
            r.raw_input_contents.append(raw)
    return r


def _bad_requests(rng: random.Random) -> list[tuple[str, object]]:
    """(method, request or raw bytes) of many kinds; every one of them is invalid for the echo agent."""
    from mlharness.agent.protos import grpc_predict_v2_pb2 as pb

    def rnd(n: int) -> bytes:
        return bytes(rng.getrandbits(8) for _ in range(n))

    cases: list[tuple[str, object]] = []
    for _ in range(60):  # random bytes where a message is expected (some happen to decode: checked below)
        cases.append((rng.choice(["ModelInfer", "ModelMetadata", "ModelReady"]), b"\xff" + rnd(rng.randrange(1, 200))))
    for _ in range(40):
        size = rng.choice([n for n in range(40) if n != 16])  # 16 bytes would be a valid [2, 1] INT64 tensor
        cases.append(("ModelInfer", _request(inputs=(("label", "INT64", [2, 1], rnd(size)),))))
    for k in range(30):
        shape = rng.choice([[k + 3, 1], [2, 7], [2], [2, 1, 1], [1 << 40, 1 << 30], [-1, 1], [-4, -1], [],
                            [0, 1], [2 ** 62, 4]])
        if shape == [2, 1] or shape == [2]:
            shape = [3, 2]
        cases.append(("ModelInfer", _request(inputs=(("label", "INT64", shape, rnd(16)),))))
    for dt in ("FP32", "INT32", "BYTES", "FP128", "", "BF16", "UINT8"):
        cases.append(("ModelInfer", _request(inputs=(("label", dt, [2, 1], rnd(16)),))))
    cases += [
        ("ModelInfer", _request(name="resnet50")),
        ("ModelInfer", _request(name="x" * 5000)),
        ("ModelMetadata", pb.ModelMetadataRequest(name="nope")),
        ("ModelMetadata", pb.ModelMetadataRequest(name="echo_labels", version="7")),
        ("ModelInfer", _request(inputs=())),
        ("ModelInfer", _request(inputs=(("image", "INT64", [2, 1], np.zeros(2, np.int64).tobytes()),))),
        ("ModelInfer", _request(inputs=(("label", "INT64", [2, 1], None),))),  # typed contents: none given
        ("ModelInfer", _request(inputs=(("label", "INT64", [2, 1], b"\0" * 16),) * 2)),
        ("ModelInfer", _request(inputs=(("label", "BYTES", [2, 1], b"\xff\xff\xff\x7f" + rnd(8)),))),
    ]
    qsl = _request()
    qsl.parameters["mlharness_qsl"].string_param = "load"
    cases.append(("ModelInfer", qsl))
    wrong_output = _request()
    wrong_output.outputs.add(name="logits")
    cases.append(("ModelInfer", wrong_output))
    extra_raw = _request()
    extra_raw.raw_input_contents.append(b"extra")
    cases.append(("ModelInfer", extra_raw))
    return cases


def _send(address: str, cases: list[tuple[str, object]]) -> dict[str, int]:
    """Send every case on a raw channel; assert each is refused with a client-error status."""
    import grpc

    statuses: dict[str, int] = {}
    with grpc.insecure_channel(address) as channel:
        for method, request in cases:
            data = request if isinstance(request, bytes) else request.SerializeToString()
            call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")  # raw bytes both ways
            try:
                call(data, timeout=10)
            except grpc.RpcError as e:
                statuses[e.code().name] = statuses.get(e.code().name, 0) + 1
                assert e.code().name in CLIENT_ERRORS, (method, data[:80], e.code(), e.details())
                continue
            # random bytes that happen to decode as a valid metadata request: answered, fine
            assert isinstance(request, bytes) and method != "ModelInfer", (method, data[:80])
            statuses["OK"] = statuses.get("OK", 0) + 1
    return statuses


def _assert_still_serves(address: str) -> None:
    import grpc

    from mlharness.agent.protos import grpc_predict_v2_pb2_grpc as pb_grpc

    request = _request(inputs=(("label", "INT64", [3, 1], np.arange(3, dtype=np.int64).tobytes()),))
    with grpc.insecure_channel(address) as channel:
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10)
    assert from_raw("INT64", [3, 1], response.raw_output_contents[0], "label").ravel().tolist() == [0, 1, 2]


@pytest.mark.slow
def test_fuzzed_requests_cost_one_line_each_at_most(tmp_path, shared_cache):
    rng = random.Random(20)
    manifest = str(_echo_manifest(tmp_path, 0))
    kinds = _bad_requests(rng)
    # without rate limiting: every kind of bad request costs exactly one line, never a traceback
    proc = _agent(shared_cache, "--manifest", manifest, MLHARNESS_AGENT_LOG_BURST="100000")
    try:
        before = len(proc.lines)
        statuses = _send(proc.address, kinds)
        assert statuses.get("INVALID_ARGUMENT", 0) > len(kinds) // 2 and statuses.get("NOT_FOUND"), statuses
        _assert_still_serves(proc.address)
        grown = proc.lines[before:]
        refused = len(kinds) - statuses.get("OK", 0)
        assert len(grown) == refused, (len(grown), refused, grown[:5])
        text = "".join(grown)
        assert "Traceback" not in text and "unexpected error" not in text, text
        assert all(" refused: " in line for line in grown), grown
    finally:
        assert proc.stop() == 0

    # with the default rate limit, a flood costs a few lines and a summary
    proc = _agent(shared_cache, "--manifest", manifest)
    try:
        before = len(proc.lines)
        cases = kinds * 8
        statuses = _send(proc.address, cases)
        _assert_still_serves(proc.address)
        grown = proc.lines[before:]
        assert len(grown) <= 10 * 3, grown  # 10 lines per 10 s window (the flood takes a few seconds at most)
        assert len(cases) > 1000 and "Traceback" not in "".join(grown)
    finally:
        assert proc.stop() == 0
    assert any(re.search(r"suppressed \d+ similar messages", line) for line in proc.lines), proc.lines[-5:]
    assert not any("Traceback" in line for line in proc.lines)


def test_rate_limit_lets_a_burst_through_then_summarises():
    import logging

    from mlharness.agent.guard import RateLimit

    now = [0.0]
    limit = RateLimit(burst=3, interval_s=10.0, clock=lambda: now[0])
    logger = logging.getLogger("mlharness.test.ratelimit")
    logger.propagate = False
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.addFilter(limit)
    try:
        for k in range(50):
            try:
                raise ValueError(f"bad\nrequest {k}")
            except ValueError:
                logger.exception("request %d failed", k)
        assert len(records) == 3 and limit.suppressed == 47
        assert all(r.exc_info is None and "\n" not in r.getMessage() for r in records)
        now[0] = 10.5
        logger.warning("next window")
        assert records[-1].getMessage() == "next window (suppressed 47 similar messages)"
        limit.flush(logger)
        assert len(records) == 4  # nothing pending
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(limit)


def test_element_count_rejects_bogus_shapes():
    from mlharness.agent.tensors import element_count
    from mlharness.errors import AgentError

    assert element_count([2, 3], "x") == 6 and element_count([], "x") == 1
    for shape in ([-1, 2], [1 << 40, 1 << 30]):
        with pytest.raises(AgentError) as e:
            element_count(shape, "input 'x'")
        assert e.value.status == "INVALID_ARGUMENT"
    datatype, shape, raw = to_raw(np.arange(4, dtype=np.int32))
    with pytest.raises(AgentError, match="negative dimension"):
        from_raw(datatype, [-2, -2], raw, "input 'x'")


@pytest.mark.slow
def test_run_connection_flags_and_tls_mismatch(run_cli, tmp_path, shared_cache):
    pytest.importorskip("cryptography")
    cert, key = _self_signed(tmp_path)
    # TLS, a token and client certificates (the self-signed certificate is its own CA)
    secure = _agent(shared_cache, "--tls-cert", str(cert), "--tls-key", str(key), "--tls-client-ca", str(cert),
                    "--token", "s3cret")
    plain = _agent(shared_cache)
    env = _env(shared_cache)  # no token or CA in the environment: only the flags
    try:
        out = tmp_path / "acc"
        proc = run_cli("run", "--scenario", "Offline", "--count", "32", "--agent", secure.address, "--token",
                       "s3cret", "--tls-ca", str(cert), "--tls-cert", str(cert), "--tls-key", str(key),
                       "--output", str(out), "--no-progress", env=env)
        assert proc.returncode == 0, proc.stderr
        assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=32, total=32\n"
        proc = run_cli("run", "--scenario", "Offline", "--count", "32", "--agent", secure.address, "--tls-ca",
                       str(cert), "--tls-cert", str(cert), "--tls-key", str(key), "--output", str(tmp_path / "t"),
                       "--no-progress", env=env)
        assert proc.returncode == 2 and "UNAUTHENTICATED" in proc.stderr and "--token" in proc.stderr, proc.stderr
        proc = run_cli("agent", "info", secure.address, "--token", "s3cret", "--tls-ca", str(cert), "--tls-cert",
                       str(cert), "--tls-key", str(key), "--json", env=env)
        assert proc.returncode == 0 and '"demo"' in proc.stdout, proc.stderr
        # plaintext client -> TLS agent, and TLS client -> plaintext agent: named as such, no gRPC log lines
        for args, address, message in (
                ((), secure.address, f"the agent at {secure.address} speaks TLS and this client does not; pass "
                                     f"--tls-ca"),
                (("--tls-ca", str(cert)), plain.address, f"the agent at {plain.address} does not speak TLS")):
            proc = run_cli("run", "--scenario", "Offline", "--count", "8", "--agent", address, *args, "--output",
                           str(tmp_path / "mismatch"), "--no-progress", env=env, timeout=60)
            assert proc.returncode == 2 and message in proc.stderr, proc.stderr
            assert "Traceback" not in proc.stderr and "ssl_transport_security" not in proc.stderr, proc.stderr
            proc = run_cli("agent", "info", address, *args, "--timeout", "5", env=env)
            assert proc.returncode == 2 and message in proc.stderr, proc.stderr
            assert "ssl_transport_security" not in proc.stderr, proc.stderr
        # -vv lets gRPC's own lines through (the check above can see them); gRPC's core logs the failed handshake
        # from a thread of its own, which does not always write before the process has ended
        proc = run_cli("-vv", "agent", "info", plain.address, "--tls-ca", str(cert), "--timeout", "5", env=env)
        assert proc.returncode == 2 and f"the agent at {plain.address} does not speak TLS" in proc.stderr, proc.stderr
        proc = run_cli("run", "--scenario", "Offline", "--agent", plain.address, "--tls-cert", str(cert),
                       "--no-progress", env=env)
        assert proc.returncode == 2 and "both --tls-cert and --tls-key" in proc.stderr, proc.stderr
        proc = run_cli("run", "--scenario", "Offline", "--token", "s3cret", "--no-progress", env=env)
        assert proc.returncode == 2 and "--token apply to agents: add --agent" in proc.stderr, proc.stderr
    finally:
        assert secure.stop() == 0 and plain.stop() == 0


def test_an_unexpected_error_is_one_line_without_traceback(tmp_path, shared_cache, monkeypatch, caplog):
    import grpc

    from mlharness.agent import server as agent_server
    from mlharness.agent.protos import grpc_predict_v2_pb2_grpc as pb_grpc
    from mlharness.agent.server import AgentConfig, AgentServer

    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    monkeypatch.setattr(agent_server.REQUEST_LIMIT, "_window_start", -float("inf"))  # a fresh window
    server = AgentServer(AgentConfig(manifest=str(_echo_manifest(tmp_path, 0)), port=0))

    def broken(inputs):
        raise KeyError("a bug in the model code")

    server.batcher._run = broken
    address = f"127.0.0.1:{server.start()}"
    try:
        with caplog.at_level("INFO"), grpc.insecure_channel(address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(_request(), timeout=10)
        assert e.value.code() == grpc.StatusCode.INTERNAL and "a bug in the model code" in e.value.details()
        records = [r for r in caplog.records if r.name == "mlharness.agent.requests"]
        assert len(records) == 1 and records[0].exc_info is None, records
        assert "unexpected error" in records[0].getMessage() and "\n" not in records[0].getMessage()
    finally:
        server.stop(0)
