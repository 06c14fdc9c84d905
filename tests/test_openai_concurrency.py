"""The ``openai`` predictor's client at scale, against the fast fake OpenAI-compatible server
(:mod:`mlharness.measurement.fake_openai`, a subprocess on 127.0.0.1): connections are kept alive and reused, the
token streams reach the SUT and LoadGen from a fixed set of threads however many requests are in flight, and
2,000 concurrent streams through a real LoadGen Offline run complete every sample once with the server's ids. The
byte-level SSE parser is checked against the line-by-line reader of the SSE rules on awkward splits."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlharness.measurement.fake_openai import FakeOpenAI, token_ids
from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.generative import TokenRequest
from mlharness.predictors.openai.http import LineTooLong, bounded_lines, sse_data
from mlharness.predictors.openai.sse import SSEParser
from tests.test_openai import Recorder

MANIFEST = """\
name: openai_concurrency
framework:
  name: openai
  warmup: 0
  options: {options}
inputs: [{{name: prompt, element_type: int64, shape: [-1]}}]
outputs: [{{name: tokens, element_type: int32, shape: [-1]}}]
response: {{kind: tokens}}
generation: {{max_new_tokens: {max_new}}}
batching: {{max_batchsize: 64}}
dataset:
  name: concurrency_prompts
  init: |
    def init(count):
        return count or 16
  load: |
    def load(sample_list):
        pass
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      return np.asarray([index % 97 + 1, index // 97 + 1, 5], dtype=np.int64)
"""


def prompt(index: int) -> list[int]:
    return [index % 97 + 1, index // 97 + 1, 5]


# -- the SSE parser --------------------------------------------------------------------------------------------
STREAM = (b": ping\r\n\r\ndata: {\"a\": 1}\r\n\r\nevent: x\ndata: first\ndata: second\n\n"
          b"id: 7\n\ndata:{\"b\":2}\n\n: comment\ndata: [DONE]\n\n" + b"".join(
              b'data: {"choices":[{"text":" w%d","token_ids":[%d]}]}\n\n' % (i, i) for i in range(40)) +
          b"data: tail without its blank line")


def test_the_byte_parser_gives_the_events_of_the_line_reader_however_the_bytes_are_split():
    want = [s.encode() for s in sse_data(bounded_lines(iter([STREAM])))]
    assert len(want) == 45 and want[1] == b"first\nsecond" and want[-1] == b"tail without its blank line"
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(1, 60)))
        parts = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        parser = SSEParser()
        got = [d for part in parts for d in parser.feed(part)] + parser.end()
        assert got == want, cuts
    with pytest.raises(LineTooLong, match="a line of more than 64 bytes"):
        parser = SSEParser(limit=64)
        for _ in range(10):
            parser.feed(b"x" * 10)


# -- the predictor against the fake server -------------------------------------------------------------------
def predictor(url: str, **options: Any):
    p = PREDICTORS.get("openai")(PredictorConfig(model_path=None, input_names=[], output_names=[], options={
        "endpoints": [url], "vocab_size": 256, **options}))
    p.load()
    return p


def test_sequential_requests_reuse_one_kept_alive_connection():
    with FakeOpenAI(tokens=8, delay_s=0.0) as srv:
        p = predictor(srv.url, model="fake-model", generation={"max_new_tokens": 8})
        try:
            srv.reset()
            for i in range(100):
                st = Recorder()
                p.submit([TokenRequest(i, np.asarray(prompt(i)))], [st])
                assert p.drain(timeout_s=30)
                assert st.error is None, st.error
                assert st.result.tolist() == token_ids(prompt(i), 8)
            described = p.describe()
        finally:
            p.close()
        stats = srv.stats()  # this request's own connection counts too
    assert stats["requests"] == 100 and stats["completed"] == 100 and stats["aborted"] == 0
    assert stats["connections"] - 1 == 1, stats
    assert described["peak_in_flight"] == 1 and described["max_concurrency"] == 16384  # the default: the ceiling


def write_manifest(tmp_path: Path, max_new: int, **options: Any) -> Path:
    path = tmp_path / "concurrency.yaml"
    path.write_text(MANIFEST.format(options=json.dumps({"vocab_size": 256, **options}), max_new=max_new))
    return path


def answers(out: Path) -> dict[int, list[int]]:
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    got: dict[int, list[int]] = {}
    for e in entries:
        assert e["qsl_idx"] not in got, f"sample {e['qsl_idx']} completed twice"
        got[e["qsl_idx"]] = np.frombuffer(bytes.fromhex(e["data"]), dtype="<i4").tolist()
    return got


class ThreadLog:
    """The threads that call the SUT's reporting functions and LoadGen's, wrapped for the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        import mlperf_loadgen as lg

        from mlharness.kinds.tokens.sut import TokenSUT

        self.calls: dict[str, set[int]] = {}
        self._lock = threading.Lock()
        for owner, name in ((TokenSUT, "report_first"), (TokenSUT, "complete_tokens"),
                            (lg, "FirstTokenComplete"), (lg, "QuerySamplesComplete")):
            monkeypatch.setattr(owner, name, self.wrap(name, getattr(owner, name)))

    def wrap(self, name: str, fn: Any) -> Any:
        def recorded(*args: Any, **kw: Any) -> Any:
            with self._lock:
                self.calls.setdefault(name, set()).add(threading.get_ident())
            return fn(*args, **kw)

        return recorded


def run(tmp_path: Path, url: str, scenario: str, count: int, max_new: int, *extra: str, **options: Any) -> int:
    from mlharness import cli

    path = write_manifest(tmp_path, max_new, **options)
    return cli.main(["run", "--manifest", str(path), "--endpoint", url, "--scenario", scenario, "--mode", "accuracy",
                     "--count", str(count), "--output", str(tmp_path / "out"), "--no-progress", *extra])


@pytest.mark.parametrize("scenario,extra", [("Offline", []), ("Server", ["--target-qps", "400"])])
def test_streams_reach_loadgen_from_a_fixed_set_of_threads(tmp_path, monkeypatch, shared_cache, scenario, extra):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    threads = ThreadLog(monkeypatch)
    count = 300
    with FakeOpenAI(tokens=16, delay_s=0.005) as srv:
        assert run(tmp_path, srv.url, scenario, count, 16, *extra) == 0
        stats = srv.stats()
    got = answers(tmp_path / "out")
    assert sorted(got) == list(range(count))
    assert all(ids == token_ids(prompt(i), 16) for i, ids in got.items())
    assert stats["peak_streams"] > 16  # many in flight at once
    reporters = threads.calls["complete_tokens"] | threads.calls.get("report_first", set())
    assert len(reporters) == 1, threads.calls  # the predictor's event loop thread, whatever the concurrency
    assert len(threads.calls["QuerySamplesComplete"] | threads.calls.get("FirstTokenComplete", set())) == 1
    if scenario == "Server":
        assert threads.calls["report_first"] == threads.calls["complete_tokens"]


def test_two_thousand_concurrent_streams_complete_once_with_the_servers_ids(tmp_path, monkeypatch, shared_cache):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    # streams of 100 tokens (a second each at the least): they overlap even when a busy machine is slow to
    # connect them all (a thread per request held about 300 at once)
    count, tokens = 2000, 100
    t0 = time.monotonic()
    with FakeOpenAI(tokens=tokens, delay_s=0.01) as srv:
        assert run(tmp_path, srv.url, "Offline", count, tokens) == 0
        stats = srv.stats()
    took = time.monotonic() - t0
    got = answers(tmp_path / "out")
    assert sorted(got) == list(range(count))  # every sample once
    bad = [i for i, ids in got.items() if ids != token_ids(prompt(i), tokens)]
    assert not bad, f"{len(bad)} samples differ from what the server sent, e.g. {bad[:5]}"
    assert stats["completed"] == count and stats["aborted"] == 0
    assert stats["peak_streams"] >= 1900, stats
    assert stats["connections"] <= count + 3, stats  # one per stream in flight at most, none per retry
    assert took < 60


ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
          b'data: {"choices":[{"index":0,"text":" w5","token_ids":[5],"finish_reason":null}]}\n\n'
          b'data: {"choices":[{"index":0,"text":" w6","token_ids":[6],"finish_reason":"length"}]}\n\n'
          b"data: [DONE]\n\n")


def test_a_connection_reset_before_the_answer_is_sent_again_and_the_endpoint_stays():
    """A server whose full listen backlog resets connections is busy, not gone: the request is sent again after a
    backoff, and the only endpoint stays alive for the others."""
    import socket
    import struct

    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(20)
    seen = []

    def serve() -> None:
        for i in range(3):
            conn, _ = server.accept()
            conn.recv(65536)  # the request
            seen.append(i)
            if i < 2:  # reset (RST) before any answer
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                conn.sendall(ANSWER)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    p = predictor(f"http://127.0.0.1:{server.getsockname()[1]}", model="m", generation={"max_new_tokens": 2},
                  retry_backoff_s=0.05)
    try:
        st = Recorder()
        p.submit([TokenRequest(0, np.asarray(prompt(0)))], [st])
        assert p.drain(timeout_s=30)
        alive = [e["alive"] for e in p.describe()["endpoints"]]
    finally:
        p.close()
        thread.join(10)
        server.close()
    assert st.error is None, st.error
    assert st.result.tolist() == [5, 6] and seen == [0, 1, 2]
    assert alive == [True]


FD_CHECK = """
import resource, sys
from mlharness.errors import PredictorError
from mlharness.predictors.openai.async_runner import FD_MARGIN, raise_fd_limit
resource.setrlimit(resource.RLIMIT_NOFILE, (300, 1024))
assert raise_fd_limit(500, "options.max_concurrency") == 500
assert resource.getrlimit(resource.RLIMIT_NOFILE) == (500 + FD_MARGIN, 1024), resource.getrlimit(resource.RLIMIT_NOFILE)
assert raise_fd_limit(4096, None) == 1024 - FD_MARGIN
try:
    raise_fd_limit(4096, "options.max_concurrency")
except PredictorError as e:
    print(e)
"""


def test_the_open_file_limit_is_raised_for_the_concurrency_or_refused_clearly():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", FD_CHECK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("options.max_concurrency = 4096 needs 4352 open files, but this process may open "
                                   "only 1024 (RLIMIT_NOFILE, hard limit 1024): lower it to 768 or raise the limit "
                                   "(ulimit -n 4352)")
