"""The ``openai`` predictor against a stand-in OpenAI-compatible server: token ids from the server, the tokenizing
fallback, least-outstanding balancing, the retry on another endpoint, errors, the API key and the CLI flag."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.generative import TokenRequest
from mlharness.predictors.openai.http import sse_data
from tests.helpers.openai_stub import StubServer


class Recorder:
    def __init__(self) -> None:
        self.firsts: list[np.ndarray] = []
        self.result: np.ndarray | None = None
        self.error: BaseException | None = None
        self.calls = 0
        self.finished = threading.Event()

    def first(self, ids: np.ndarray) -> None:
        assert self.calls == 0, "first() after done/fail"
        self.firsts.append(ids)

    def done(self, ids: np.ndarray) -> None:
        self.calls += 1
        self.result = ids
        self.finished.set()

    def fail(self, error: BaseException) -> None:
        self.calls += 1
        self.error = error
        self.finished.set()


def predictor(**options):
    p = PREDICTORS.get("openai")(PredictorConfig(model_path=None, input_names=[], output_names=[], options=options))
    p.load()
    return p


def generate(p, prompts):
    streams = [Recorder() for _ in prompts]
    p.submit([TokenRequest(i, np.asarray(pr, dtype=np.int64)) for i, pr in enumerate(prompts)], streams)
    assert p.drain(timeout_s=30)
    assert all(s.calls == 1 for s in streams)  # exactly one done/fail each
    return streams


@pytest.fixture
def servers():
    made: list[StubServer] = []

    def make(**kw) -> StubServer:
        made.append(StubServer(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def word_tokenizer(tmp_path):
    """A word-level tokenizer in which the stub's word ``w<t>`` is token t."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{f"w{t}": t for t in range(3, 60)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>",
                            eos_token="</s>").save_pretrained(tmp_path)
    return str(tmp_path)


def test_sse_parser_follows_the_event_stream_rules():
    lines = [": comment", "event: x", "data: {\"a\":", "data: 1}", "", "", "data:[DONE]", ""]
    assert list(sse_data(iter(lines))) == ['{"a":\n1}', "[DONE]"]


def test_server_token_ids_stream_first_then_all(servers):
    s = servers(ids=True, n_tokens=6)
    p = predictor(endpoints=[s.url], generation={"max_new_tokens": 4})
    try:
        streams = generate(p, [[5, 6, 7], [1, 2]])
    finally:
        p.close()
    for prompt, st in zip([[5, 6, 7], [1, 2]], streams, strict=True):
        assert st.error is None
        assert st.result.dtype == np.int32
        assert st.result.tolist() == StubServer.tokens(prompt, 4)  # max_new_tokens honoured by the body
        assert len(st.firsts) == 1 and st.firsts[0].tolist() == st.result[:1].tolist()
    body = s.requests[0]["body"]
    assert body["stream"] is True and body["model"] == "stub-model"  # discovered through GET /v1/models
    assert isinstance(body["prompt"], list) and body["temperature"] == 0.0 and body["min_tokens"] == 2
    assert body["return_token_ids"] is True


def test_text_only_server_is_tokenized_with_the_manifest_tokenizer(servers, tmp_path):
    s = servers(ids=False, n_tokens=5)
    p = predictor(endpoints=[s.url], tokenizer=word_tokenizer(tmp_path))
    try:
        (st,) = generate(p, [[9, 9]])
    finally:
        p.close()
    assert st.error is None
    assert st.result.tolist() == StubServer.tokens([9, 9], 5)
    assert st.firsts[0].tolist() == st.result[:1].tolist()


def test_text_only_server_without_tokenizer_fails_clearly(servers):
    s = servers(ids=False)
    p = predictor(endpoints=[s.url])
    try:
        (st,) = generate(p, [[1, 2]])
    finally:
        p.close()
    assert st.error is not None and "tokenizer" in str(st.error)


def test_requests_are_balanced_by_outstanding_requests(servers):
    a, b = servers(delay_s=0.05, n_tokens=4), servers(delay_s=0.05, n_tokens=4)
    p = predictor(endpoints=[a.url, b.url])
    try:
        streams = generate(p, [[i] for i in range(12)])
    finally:
        p.close()
    assert all(st.error is None for st in streams)
    assert len(a.requests) + len(b.requests) == 12
    assert abs(len(a.requests) - len(b.requests)) <= 2
    assert a.peak > 1 and b.peak > 1  # concurrent, not one at a time


def test_a_dead_endpoint_is_retried_once_on_another(servers):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    good = servers(n_tokens=3)
    p = predictor(endpoints=[dead, good.url], model="stub-model", connect_timeout_s=2)
    try:
        streams = generate(p, [[1], [2], [3], [4]])
        assert all(st.error is None and len(st.result) == 3 for st in streams)
        assert len(good.requests) == 4
        assert [e["alive"] for e in p.describe()["endpoints"]] == [False, True]
    finally:
        p.close()


def test_a_refused_request_fails_its_stream_without_retry(servers):
    a, b = servers(status=400), servers(status=400)
    p = predictor(endpoints=[a.url, b.url])
    try:
        (st,) = generate(p, [[1, 2]])
    finally:
        p.close()
    assert st.error is not None and "HTTP 400" in str(st.error)
    assert len(a.requests) + len(b.requests) == 1


def test_error_mid_stream_fails_after_the_first_token(servers):
    s = servers(fail_after=2, n_tokens=5)
    p = predictor(endpoints=[s.url])
    try:
        (st,) = generate(p, [[1, 2]])
    finally:
        p.close()
    assert len(st.firsts) == 1 and st.error is not None and "engine died" in str(st.error)


def test_deadline_per_request(servers):
    s = servers(delay_s=0.4, n_tokens=10)
    p = predictor(endpoints=[s.url], deadline_s=0.3)
    t0 = time.monotonic()
    try:
        (st,) = generate(p, [[1]])
    finally:
        p.close()
    assert st.error is not None and time.monotonic() - t0 < 5


def test_api_key_from_the_environment(servers, monkeypatch):
    s = servers()
    monkeypatch.setenv("MY_SERVING_KEY", "sekrit")
    p = predictor(endpoints=[s.url], api_key_env="MY_SERVING_KEY")
    try:
        generate(p, [[1]])
    finally:
        p.close()
    assert s.requests[0]["headers"]["Authorization"] == "Bearer sekrit"
    monkeypatch.delenv("MY_SERVING_KEY")
    with pytest.raises(Exception, match="MY_SERVING_KEY"):
        predictor(endpoints=[s.url], api_key_env="MY_SERVING_KEY")


def test_unreachable_endpoint_at_load_and_unknown_options_are_refused(servers):
    from mlharness.errors import PredictorError

    with pytest.raises(PredictorError, match="does not answer GET /models"):
        predictor(endpoints=["http://127.0.0.1:9"], connect_timeout_s=1)
    with pytest.raises(PredictorError, match="unknown 'openai' framework option"):
        predictor(endpoints=["http://127.0.0.1:9"], bogus=1)


def test_endpoint_flag_reaches_the_run_options():
    from mlharness.cli import build_parser

    args = build_parser().parse_args(["run", "--scenario", "Offline", "--endpoint", "http://a:1", "--endpoint", "http://b:2"])
    assert args.endpoint == ["http://a:1", "http://b:2"]


def test_endpoint_flag_swaps_the_framework_for_openai():
    from mlharness.manifest.loader import load_manifest
    from mlharness.predictors.openai import endpoint_manifest

    loaded = load_manifest("demo")
    swapped = endpoint_manifest(loaded, ["http://a:1", "http://b:2"])
    fw = swapped.model.framework
    assert fw.name == "openai" and fw.options["endpoints"] == ["http://a:1", "http://b:2"]
    assert loaded.model.framework.name != "openai"  # the loaded manifest itself is left as it was


def test_close_fails_what_is_still_running_once(servers):
    s = servers(delay_s=0.2, n_tokens=50)
    p = predictor(endpoints=[s.url], max_concurrency=2)
    streams = [Recorder() for _ in range(5)]
    p.submit([TokenRequest(i, np.asarray([i])) for i in range(5)], streams)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.close()
    assert time.monotonic() - t0 < 5
    assert all(st.calls == 1 and st.error is not None and "closed" in str(st.error) for st in streams)


def test_a_server_refusing_token_prompts_gets_text(servers, tmp_path):
    s = servers(text_prompts_only=True, n_tokens=3)
    p = predictor(endpoints=[s.url], tokenizer=word_tokenizer(tmp_path))
    try:
        streams = generate(p, [[5, 6], [7, 8], [9]])
    finally:
        p.close()
    assert all(st.error is None and len(st.result) == 3 for st in streams)
    texts = [r["body"]["prompt"] for r in s.requests if isinstance(r["body"]["prompt"], str)]
    assert "w5 w6" in texts and len(texts) == 3  # decoded with the tokenizer
    fixed = predictor(endpoints=[s.url], prompt="tokens")
    try:
        (st,) = generate(fixed, [[5, 6]])
    finally:
        fixed.close()
    assert st.error is not None and "HTTP 400" in str(st.error)


def test_run_endpoint_flag_loads_the_openai_predictor(servers, tmp_path, shared_cache):
    """`mlharness run --endpoint URL` reaches the predictor: it asks the server for its model while loading.
    (The demo manifest's responses are not token streams, so the run itself ends with an error.)"""
    import os
    import subprocess
    import sys

    s = servers()
    env = {**os.environ, "MLHARNESS_CACHE": str(shared_cache)}
    proc = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--manifest", "demo", "--scenario",
                           "Offline", "--mode", "accuracy", "--count", "4", "--output", str(tmp_path / "out"),
                           "--no-progress", "--endpoint", s.url], capture_output=True, text=True, timeout=120,
                          env=env)
    assert s.model_queries >= 1, proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
