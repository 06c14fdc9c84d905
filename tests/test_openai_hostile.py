"""The ``openai`` predictor against a misbehaving OpenAI-compatible server on 127.0.0.1, through the real CLI and
the real LoadGen in SingleStream, Server and Offline: complete answers exit 0 (a transient 429/500/503 is retried
with backoff), anything else exits 3 naming the endpoint and the sample, and nothing hangs past its deadline: a
cut stream, keep-alive comments only, a trickle, one token, too many tokens, token ids outside the vocabulary. A
server that never answers GET /models fails the load within its own deadline, saying what it waits for, and one
SIGTERM stops a run stuck on a silent stream."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlharness.errors import PredictorError
from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.generative import TokenRequest
from mlharness.predictors.openai.http import bounded_lines
from tests.helpers.openai_stub import QuietServer
from tests.test_openai import Recorder

SERVER_LIMIT_S = 30.0  # no handler of the server below runs longer than this
MAX_NEW = 8
# every deadline short, so that each hostile case ends in seconds
FAST = {"first_byte_timeout_s": 4, "first_token_timeout_s": 4, "token_gap_timeout_s": 2, "deadline_s": 20,
        "models_timeout_s": 3, "retry_backoff_s": 0.1, "vocab_size": 1000}

MANIFEST = """\
name: openai_hostile
framework:
  name: openai
  warmup: 0
  options: {options}
inputs: [{{name: prompt, element_type: int64, shape: [-1]}}]
outputs: [{{name: tokens, element_type: int32, shape: [-1]}}]
response: {{kind: tokens}}
generation: {{max_new_tokens: {max_new}}}
batching: {{max_batchsize: 4}}
dataset:
  name: hostile_prompts
  init: |
    def init(count):
        return min(count or 4, 4)
  load: |
    def load(sample_list):
        pass
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      return np.arange(index + 1, index + 5, dtype=np.int64)
"""


class Hostile:
    """An OpenAI-compatible server that misbehaves as ``mode`` says. ``ok`` answers fully: ``n_tokens`` token
    chunks, the last with a finish_reason, then ``data: [DONE]``. ``429``/``500``/``503``: the first ``fail_first``
    POSTs are refused with that status (503 with ``Retry-After: 1``), then ``ok``. ``cut``: the connection closes
    after 3 tokens. ``keepalive``: ``: ping`` comments only; ``token-then-pings``: one token, then only those.
    ``trickle``: the second chunk one byte every 0.2 s. ``single``: one token. ``too-many``: max_tokens + 5.
    ``oov``: the second token id is 5000. ``silent``: never answers a POST; ``silent-models``: nor GET /models."""

    def __init__(self, mode: str, n_tokens: int = 6, fail_first: int = 1):
        self.mode, self.n_tokens, self.fail_first = mode, n_tokens, fail_first
        self.posts: list[tuple[float, list[int]]] = []  # when each POST arrived, and its prompt
        self.stop = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if server.mode == "silent-models":
                    server.stop.wait(SERVER_LIMIT_S)  # accepts the connection, never answers
                    return
                self.answer(200, {"object": "list", "data": [{"id": "hostile", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.posts.append((time.monotonic(), body["prompt"]))
                    n = len(server.posts)
                server.completion(self, body, n)

            def answer(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                if status >= 400:  # each retry on a new connection: none races a kept-alive one being closed
                    self.send_header("Connection", "close")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def completion(self, h: Any, body: dict[str, Any], n: int) -> None:
        mode = self.mode
        if mode in ("429", "500", "503") and n <= self.fail_first:
            headers = {"Retry-After": "1"} if mode == "503" else {}
            h.answer(int(mode), {"error": {"message": "busy, try again", "code": int(mode)}}, headers)
            return
        if mode == "silent":
            self.stop.wait(SERVER_LIMIT_S)  # the request is read, nothing is ever answered
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        prompt = body["prompt"]
        count = {"single": 1, "too-many": body["max_tokens"] + 5}.get(mode, min(self.n_tokens, body["max_tokens"]))
        if mode == "keepalive":
            self.pings(h)
            return
        for i in range(count):
            if mode == "cut" and i == 3:
                return  # the connection closes: no finish_reason, no [DONE]
            token = 5000 if mode == "oov" and i == 1 else (sum(prompt) + i) % 50 + 3
            last = "length" if i == count - 1 else None
            choice = {"index": 0, "text": f" w{token}", "token_ids": [token], "finish_reason": last}
            event = f"data: {json.dumps({'choices': [choice]})}\n\n".encode()
            if mode == "trickle" and i == 1:
                for b in event:  # one byte every 0.2 s: the chunk would take many seconds
                    if self.stop.wait(0.2):
                        return
                    h.wfile.write(bytes([b]))
                    h.wfile.flush()
                continue
            h.wfile.write(event)
            h.wfile.flush()
            if mode == "token-then-pings":
                self.pings(h)
                return
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()

    def pings(self, h: Any) -> None:
        """SSE keep-alive comments only, every 0.2 s, until the server is closed (or its limit)."""
        end = time.monotonic() + SERVER_LIMIT_S
        while time.monotonic() < end and not self.stop.wait(0.2):
            try:
                h.wfile.write(b": ping\n\n")
                h.wfile.flush()
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hostile():
    made: list[Hostile] = []

    def make(mode: str, **kw: Any) -> Hostile:
        made.append(Hostile(mode, **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def manifest(tmp_path: Path, **options: Any) -> Path:
    path = tmp_path / "hostile.yaml"
    path.write_text(MANIFEST.format(options=json.dumps({**FAST, **options}), max_new=MAX_NEW))
    return path


SCENARIOS = {"SingleStream": [], "MultiStream": [], "Server": ["--target-qps", "20"],
             "Interactive": ["--target-qps", "20"], "Offline": []}


def run(tmp_path: Path, server: Hostile, scenario: str, timeout: float = 60, **options: Any):
    """``mlharness run`` of 4 samples in accuracy mode against ``server``; (CompletedProcess, seconds taken)."""
    t0 = time.monotonic()
    path = manifest(tmp_path, **options)
    proc = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(path), "--endpoint",
                           server.url, "--scenario", scenario, "--mode", "accuracy", "--count", "4", "--output",
                           str(tmp_path / "out"), "--no-progress", *SCENARIOS[scenario]],
                          capture_output=True, text=True, timeout=timeout, env=dict(os.environ), cwd=tmp_path)
    return proc, time.monotonic() - t0


def answers(out: Path) -> dict[int, list[int]]:
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    return {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), dtype="<i4").tolist() for e in entries}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("mode", ["429", "500", "503"])
def test_a_transient_refusal_is_retried_and_the_run_completes(hostile, tmp_path, scenario, mode):
    server = hostile(mode)
    proc, _ = run(tmp_path, server, scenario)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = answers(tmp_path / "out")
    assert sorted(got) == [0, 1, 2, 3]
    for idx, ids in got.items():
        prompt = list(range(idx + 1, idx + 5))
        assert ids == [(sum(prompt) + i) % 50 + 3 for i in range(6)], f"sample {idx}"
    issued = len(json.loads((tmp_path / "out" / "mlperf_log_accuracy.json").read_text()))  # MultiStream: 8
    assert len(server.posts) == issued + 1  # the refused request was sent once more
    if mode == "503" and issued == 4:  # its Retry-After: 1 was honoured (each prompt sent once but the refused)
        (refused, prompt), *later = server.posts
        assert next(t for t, p in later if p == prompt) - refused >= 0.9


# mode -> what stderr says (beside the endpoint and the sample)
BROKEN = {
    "cut": r"the stream ended after 3 token\(s\) without a finish_reason or data: \[DONE\]",
    "keepalive": r"timed out: no token within 4 s \(first_token_timeout_s\)",
    "trickle": r"timed out: no new token within 2 s \(token_gap_timeout_s\)",
    "single": r"an answer of 1 token\(s\)",
    "too-many": rf"more tokens \({MAX_NEW + 1} so far\) than the request's max_tokens {MAX_NEW}",
    "oov": r"token id 5000 is outside the vocabulary of 1000 ids \(options.vocab_size\)",
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("mode", list(BROKEN))
def test_an_incomplete_or_wrong_answer_fails_the_run_naming_endpoint_and_sample(hostile, tmp_path, scenario, mode):
    server = hostile(mode)
    proc, took = run(tmp_path, server, scenario)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert re.search(BROKEN[mode], proc.stderr), proc.stderr[-3000:]
    assert re.search(rf"endpoint {server.url}/v1/completions, sample \d \(qsl_idx\): {BROKEN[mode]}", proc.stderr)
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # no answer was taken as a result
    assert took < 40, f"{mode} took {took:.0f} s"


def test_a_server_that_never_answers_get_models_fails_the_load_in_seconds(hostile, tmp_path):
    server = hostile("silent-models")
    proc, took = run(tmp_path, server, "Offline")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"waiting for {server.url}/v1 to answer GET /models" in proc.stderr  # said after 2 s, without -v
    assert f"endpoint {server.url}/v1 does not answer GET /models (no answer within 3 s" in proc.stderr
    assert took < 30


def test_one_sigterm_stops_a_run_stuck_on_keep_alive_comments(hostile, tmp_path):
    """Default deadlines (the first token may take 60 s): the run waits on a server that only sends keep-alive
    comments; one SIGTERM ends it with 143 within seconds, the partial output kept."""
    server = hostile("keepalive")
    path = tmp_path / "hostile.yaml"
    path.write_text(MANIFEST.format(options=json.dumps({}), max_new=MAX_NEW))
    err = open(tmp_path / "stderr.txt", "w")  # noqa: SIM115 - the child writes it
    proc = subprocess.Popen([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(path), "--endpoint",
                             server.url, "--scenario", "Server", "--mode", "accuracy", "--count", "4", "--target-qps",
                             "20", "--output", str(tmp_path / "out"), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path, env=dict(os.environ))
    try:
        end = time.monotonic() + 60
        while not server.posts and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.1)
        assert server.posts, (tmp_path / "stderr.txt").read_text()
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert rc == 143, stderr
    assert took < 10, f"{took:.1f} s"
    assert "interrupted by SIGTERM" in stderr and "Traceback" not in stderr, stderr


# -- the predictor in-process: option checks and the vocabulary a model folder declares -------------------------
def predictor(**options: Any):
    p = PREDICTORS.get("openai")(PredictorConfig(model_path=options.pop("model_path", None), input_names=[],
                                                 output_names=[], options=options, manifest_path="m.yaml"))
    p.load()
    return p


@pytest.mark.parametrize("field,value", [("token_gap_timeout_s", -1), ("first_token_timeout_s", float("nan")),
                                         ("first_byte_timeout_s", "30"), ("deadline_s", float("inf")),
                                         ("connect_timeout_s", 0), ("models_timeout_s", True), ("retries", -1),
                                         ("max_concurrency", 0), ("vocab_size", 2.5)])
def test_bad_deadline_and_retry_options_are_refused_naming_the_field(field, value):
    with pytest.raises(PredictorError, match=rf"^m.yaml: framework 'openai': options.{field} is "):
        predictor(endpoints=["http://127.0.0.1:9"], model="x", **{field: value})


def test_ids_outside_the_model_folders_vocabulary_fail_the_sample(hostile, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 20}))
    server = hostile("ok")
    p = predictor(endpoints=[server.url], model_path=str(tmp_path))
    st = Recorder()
    try:
        p.submit([TokenRequest(7, np.asarray([40, 41]))], [st])  # ids 34 and up
        assert p.drain(timeout_s=30)
    finally:
        p.close()
    assert st.calls == 1 and st.error is not None
    assert f"endpoint {server.url}/v1/completions, sample 7 (qsl_idx): token id 34 is outside the vocabulary of 20 " \
           f"ids (the model folder {tmp_path})" == str(st.error)


def generate(p: Any, index: int = 0) -> tuple[Recorder, float]:
    st = Recorder()
    t0 = time.monotonic()
    try:
        p.submit([TokenRequest(index, np.asarray([1, 2]))], [st])
        assert p.drain(timeout_s=30)
    finally:
        p.close()
    assert st.calls == 1
    return st, time.monotonic() - t0


def test_a_server_that_keeps_refusing_is_given_up_after_the_retries(hostile):
    server = hostile("503", fail_first=100)
    p = predictor(endpoints=[server.url], model="hostile", retries=2, retry_backoff_s=0.05, retry_max_wait_s=0.1)
    st, took = generate(p, 5)
    assert len(server.posts) == 3 and took < 10  # Retry-After: 1 capped by retry_max_wait_s
    assert f"endpoint {server.url}/v1/completions answered HTTP 503 for sample 5 (qsl_idx)" in str(st.error)
    assert "still failing after 3 tries (options.retries = 2)" in str(st.error)
    assert [e["alive"] for e in p.describe()["endpoints"]] == [False]


@pytest.mark.parametrize("mode,deadline,said", [
    ("silent", {"first_byte_timeout_s": 1}, "no response headers within 1 s (first_byte_timeout_s)"),
    ("token-then-pings", {"token_gap_timeout_s": 1}, "no new token within 1 s (token_gap_timeout_s)"),
    ("keepalive", {"deadline_s": 1}, "the request passed its whole deadline (deadline_s = 1 s)"),
])
def test_each_deadline_fails_a_silent_or_pinging_server_in_seconds(hostile, mode, deadline, said):
    """Keep-alive comments do not move the deadlines on; only chunks carrying tokens do."""
    server = hostile(mode)
    p = predictor(endpoints=[server.url], model="hostile", **deadline)
    st, took = generate(p, 2)
    assert st.error is not None and said in str(st.error), st.error
    assert f"{server.url}/v1/completions, sample 2 (qsl_idx): timed out" in str(st.error)
    assert took < 10
    assert len(st.firsts) == (1 if mode == "token-then-pings" else 0)
    assert p.watch.active  # the client's reads are bounded by the deadlines (else only between SSE lines)


def test_a_failure_after_the_first_token_is_never_sent_again(hostile):
    server = hostile("cut")
    p = predictor(endpoints=[server.url], model="hostile")
    st, _ = generate(p, 1)
    assert len(server.posts) == 1 and len(st.firsts) == 1  # a retry would stream the first tokens twice
    assert "sample 1 (qsl_idx): the stream ended after 3 token(s)" in str(st.error)


def test_lines_are_split_across_chunks_and_bounded():
    chunks = [b"data: a\r", b"\n: ping\rdata: b\n", b"\ndata: c"]
    assert list(bounded_lines(iter(chunks))) == ["data: a", ": ping", "data: b", "", "data: c"]
    with pytest.raises(ValueError, match="a line of more than 16 bytes"):
        list(bounded_lines(iter([b"x" * 10, b"y" * 10]), limit=16))
