"""The fake OpenAI server, the bare client and ``mlharness bench client``: ids a client can check, a chunked body
that ends so one keep-alive connection serves many requests, the server's counts of streams held, and the bench's
figures consistent with each other and with the LoadGen logs of the runs it launched."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlharness.measurement.bench_client import ClientBenchConfig, format_figures, run_vllm, summary_values
from tests.helpers.fake_openai import FakeOpenAI, token_ids

pytest.importorskip("aiohttp")
VLLM_PYTHON = os.environ.get("MLHARNESS_VLLM_PYTHON")


def events(body: str) -> list[str]:
    """The data of each Server-Sent Event of a body."""
    return [line[len("data: "):] for line in body.split("\n") if line.startswith("data: ")]


def post(conn: http.client.HTTPConnection, body: dict) -> tuple[int, str]:
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read().decode()


def test_fake_server_streams_checkable_ids_over_one_keepalive_connection():
    with FakeOpenAI(tokens=6, delay_s=0.0, eos_after=None) as server:
        server.reset()
        port = int(server.url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        prompts: list = [[1, 2, 3], [7, 7, 7, 7], "a text prompt", [250, 251]]
        for i, prompt in enumerate(prompts):
            body = {"model": "fake-model", "prompt": prompt, "stream": True, "return_token_ids": True}
            if i % 2:
                body["max_tokens"] = 3 + i
            status, text = post(conn, body)
            assert status == 200
            data = events(text)
            assert data[-1] == "[DONE]"
            chunks = [json.loads(d) for d in data[:-1]]
            want = token_ids(prompt, 3 + i if i % 2 else 6)
            assert [c["choices"][0]["token_ids"][0] for c in chunks] == want  # one token per chunk, as computed
            assert [c["choices"][0]["text"] for c in chunks] == [f" w{t}" for t in want]
            assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == ("length" if i % 2 else "stop")
            assert all(3 <= t < 256 for t in want)
        assert token_ids([1, 2, 3], 6) != token_ids([1, 2, 4], 6)
        # the usage chunk vllm bench serve reads, and a non-streamed answer with the same ids
        status, text = post(conn, {"prompt": [5], "max_tokens": 4, "stream": True,
                                   "stream_options": {"include_usage": True}})
        usage = json.loads(events(text)[-2])
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4
        status, text = post(conn, {"prompt": [5], "max_tokens": 4})
        assert json.loads(text)["choices"][0]["token_ids"] == token_ids([5], 4)
        # errors name what is wrong, and the connection stays usable
        status, text = post(conn, {"prompt": [1], "max_tokens": -1})
        assert status == 400 and "max_tokens" in text
        conn.request("GET", "/v1/nothing")
        r = conn.getresponse()
        assert r.status == 404 and "/v1/completions" in r.read().decode()
        conn.request("GET", "/v1/models")
        assert json.loads(conn.getresponse().read())["data"][0]["id"] == "fake-model"
        stats = server.stats()
        assert stats["connections"] == 2  # this one, and the stats request's own
        assert stats["requests"] == stats["completed"] == len(prompts) + 2  # the refused one is not a completion
        assert stats["http_requests"] == len(prompts) + 6  # + refused, 404, models and the stats request
        assert stats["streams"] == 0 and stats["peak_streams"] == 1
        conn.close()


def test_fake_server_ends_the_chunked_body_and_keeps_the_socket_open():
    with FakeOpenAI(tokens=2, delay_s=0.0) as server:
        port = int(server.url.rsplit(":", 1)[1])
        raw = json.dumps({"prompt": [9], "stream": True}).encode()
        request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%b" % (len(raw), raw))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            for _ in range(3):  # the same socket: the body ended where the next answer starts
                s.sendall(request)
                got = b""
                while not got.endswith(b"0\r\n\r\n"):
                    part = s.recv(65536)
                    assert part, f"the server closed the connection after {got!r}"
                    got += part
                assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"Transfer-Encoding: chunked" in got
                assert got.count(b"HTTP/1.1") == 1 and b"data: [DONE]\n\n\r\n0\r\n\r\n" in got
        assert server.stats()["requests"] >= 3


def test_a_client_that_hangs_up_mid_stream_is_counted_and_its_stream_closed():
    with FakeOpenAI(tokens=40, delay_s=0.02) as server:
        server.reset()
        raw = json.dumps({"prompt": [1], "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(raw), raw))
            assert b"token_ids" in s.recv(65536) + s.recv(65536)
            assert server.stats()["streams"] == 1
        for _ in range(100):  # the next chunk's timer finds the connection closed
            stats = server.stats()
            if stats["streams"] == 0:
                break
            time.sleep(0.02)
        assert stats["streams"] == 0 and stats["aborted"] == 1 and stats["completed"] == 0
        assert 0 < stats["tokens"] < 40


def test_eos_after_ends_answers_early_but_not_before_min_tokens():
    with FakeOpenAI(tokens=50, delay_s=0.0, eos_after=3) as server:
        conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=10)
        assert len(events(post(conn, {"prompt": [1], "max_tokens": 20, "stream": True})[1])) == 3 + 1
        assert len(events(post(conn, {"prompt": [1], "max_tokens": 20, "min_tokens": 5, "stream": True})[1])) == 6
        assert len(events(post(conn, {"prompt": [1], "max_tokens": 2, "stream": True})[1])) == 3
        conn.close()


def test_peak_streams_equal_the_bare_clients_concurrency():
    with FakeOpenAI(tokens=4, delay_s=0.15) as server:
        server.reset()
        out = subprocess.run([sys.executable, "-m", "mlharness.measurement.bare_client", "--url", server.url,
                              "--count", "48", "--concurrency", "24", "--tokens", "4"],
                             capture_output=True, text=True, timeout=60, check=True)
        got = json.loads(out.stdout)
        stats = server.stats()
    assert got["requests"] == 48 and got["tokens"] == 48 * 4 and got["short"] == 0
    assert stats["peak_streams"] == 24  # no more in flight than asked, and all of them at once
    assert stats["requests"] == 48 and stats["tokens"] == 48 * 4
    assert stats["connections"] == 24 + 1  # kept alive across the two waves (+ the stats request)
    assert got["tokens_per_s"] == pytest.approx(got["requests_per_s"] * 4)


def test_bench_client_refuses_settings_out_of_range(env):
    r = subprocess.run([sys.executable, "-m", "mlharness.cli", "bench", "client", "--tokens", "1"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0 and "--tokens 1" in r.stderr and "one-token" in r.stderr
    with pytest.raises(Exception, match="--concurrency 0"):
        ClientBenchConfig(concurrency=[4, 0]).check()


def test_bench_client_quick_figures_agree_with_each_other_and_loadgen(env, tmp_path: Path):
    work = tmp_path / "work"
    r = subprocess.run([sys.executable, "-m", "mlharness.cli", "bench", "client", "--quick", "--json",
                        "--workdir", str(work)], capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    figures = json.loads(r.stdout)
    st = figures["settings"]
    assert (st["tokens"], st["rounds"], st["concurrency"]) == (16, 1, [8])
    (entry,) = figures["rounds"]
    n, tokens = entry["requests"], st["tokens"]
    ml, bare, server = entry["mlharness"], entry["bare"], entry["mlharness_server"]
    summary = summary_values(Path(ml["run_dir"]) / "mlperf_log_summary.txt")
    assert summary["Scenario"] == "Offline" and summary["Mode"] == "PerformanceOnly"
    assert ml["requests_per_s"] == float(summary["Samples per second"])  # the run it launched
    assert ml["tokens_per_s"] == pytest.approx(ml["requests_per_s"] * tokens)
    assert ml["loadgen_tokens_per_s"] == pytest.approx(ml["tokens_per_s"], rel=1e-4)  # LoadGen's own count
    assert bare["tokens_per_s"] == pytest.approx(bare["requests_per_s"] * tokens)
    assert entry["ratio"] == pytest.approx(ml["requests_per_s"] / bare["requests_per_s"])
    # the server saw exactly the requests each client was asked for, at the concurrency asked
    for client in (ml, bare):
        assert client["requests"] == n and client["tokens"] == n * tokens
        assert client["peak_streams"] == 8
        assert client["cpu_s_per_1k_tokens"] > 0
    assert server["target_qps"] == pytest.approx(bare["requests_per_s"] / 2)
    assert summary_values(Path(server["run_dir"]) / "mlperf_log_summary.txt")["Scenario"] == "Server"
    assert server["requests"] == n and 1 <= server["peak_streams"] <= 8
    row = figures["summary"]["8"]
    assert row["ratio"]["median"] == pytest.approx(entry["ratio"])
    assert row["mlharness"]["requests_per_s"]["min"] == ml["requests_per_s"]
    text = format_figures(figures)
    assert "mlharness / bare" in text and f"{entry['ratio']:.3f}" in text and "bare asyncio client" in text


@pytest.mark.skipif(not VLLM_PYTHON, reason="vLLM is not installed (.ci/run installs it and sets "
                    "MLHARNESS_VLLM_PYTHON)")
def test_vllm_bench_serve_drives_the_fake_server(tmp_path: Path):
    from mlharness.tasks.cnndm.tiny_tokenizer import save_tokenizer

    cfg = ClientBenchConfig(tokens=8, vllm_python=VLLM_PYTHON)
    with FakeOpenAI(tokens=8, delay_s=0.001) as server:
        got = run_vllm(cfg, server, 32, 4, sorted(os.sched_getaffinity(0))[-1], save_tokenizer(tmp_path / "tok"),
                       tmp_path / "vllm")
    assert got["requests"] == 32 and got["tokens"] == 32 * 8  # counted from the usage chunks
    assert got["peak_streams"] == 4
    assert got["tokens_per_s"] == pytest.approx(got["requests_per_s"] * 8, rel=1e-3)
