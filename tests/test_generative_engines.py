"""The engine loop of the generative predictors without vLLM: the vllm predictor against a stand-in for vLLM's
LLMEngine (tests/test_vllm_inprocess.py runs the real one, vLLM's CPU build, where it is installed), and the
queued engine's guarantees."""

from __future__ import annotations

import sys
import threading
import time
import types

import numpy as np
import pytest

from mlharness.errors import PredictorError
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.generative import GenerationConfig, TokenRequest


class Recorder:
    def __init__(self) -> None:
        self.firsts: list[list[int]] = []
        self.result: list[int] | None = None
        self.error: BaseException | None = None
        self.ended = threading.Event()

    def first(self, ids):
        self.firsts.append(np.asarray(ids).tolist())

    def done(self, ids):
        self.result = np.asarray(ids).tolist()
        self.ended.set()

    def fail(self, error):
        self.error = error
        self.ended.set()


class FakeEngine:
    """vLLM's LLMEngine as the predictor uses it: add_request, then step() returns each running request's delta."""

    def __init__(self) -> None:
        self.running: dict[str, list] = {}
        self.steps: list[set[str]] = []

    def add_request(self, request_id, prompt, params):
        self.running[request_id] = [list(prompt["prompt_token_ids"]), params.kwargs["max_tokens"], 0]

    def step(self):
        time.sleep(0.01)
        self.steps.append(set(self.running))
        outs = []
        for rid, state in list(self.running.items()):
            prompt, limit, n = state
            state[2] = n + 1
            finished = state[2] >= limit
            token = prompt[n % len(prompt)]
            outs.append(types.SimpleNamespace(request_id=rid, finished=finished,
                                              outputs=[types.SimpleNamespace(token_ids=[token])]))
            if finished:
                del self.running[rid]
        return outs


@pytest.fixture
def fake_vllm(monkeypatch):
    engine = FakeEngine()
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kw: types.SimpleNamespace(kwargs=kw)
    vllm.EngineArgs = lambda **kw: kw
    vllm.LLMEngine = types.SimpleNamespace(from_engine_args=lambda args: engine)
    sp = types.ModuleType("vllm.sampling_params")
    sp.RequestOutputKind = types.SimpleNamespace(DELTA="delta")
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    for name, module in (("vllm", vllm), ("vllm.sampling_params", sp), ("vllm.inputs", inputs)):
        monkeypatch.setitem(sys.modules, name, module)
    return engine


def vllm_predictor(max_new_tokens: int):
    from mlharness.predictors.vllm import VllmPredictor

    config = PredictorConfig(model_path="/models/llama", input_names=["ids"], output_names=["tokens"],
                             max_batchsize=8, generation=GenerationConfig(max_new_tokens=max_new_tokens))
    p = VllmPredictor(config)
    p.load()
    return p


def test_vllm_streams_deltas_and_requests_join_the_running_batch(fake_vllm):
    p = vllm_predictor(max_new_tokens=20)
    try:
        assert p.params.kwargs["output_kind"] == "delta" and p.params.kwargs["temperature"] == 0.0
        a, b = Recorder(), Recorder()
        p.submit([TokenRequest(0, np.array([5, 6, 7]))], [a])
        while not a.firsts:
            time.sleep(0.005)
        p.submit([TokenRequest(1, np.array([9, 8]))], [b])  # while request 0 is generating
        assert p.drain(timeout_s=10)
        assert a.result == [5, 6, 7] * 6 + [5, 6] and a.firsts == [[5]]
        assert b.result == [9, 8] * 10 and b.firsts == [[9]]
        # continuous batching: request 1 ran in the same engine steps as request 0, not after it
        assert any(step == {"0", "1"} for step in fake_vllm.steps)
    finally:
        p.close()


def test_vllm_step_failure_fails_the_running_requests(fake_vllm):
    p = vllm_predictor(max_new_tokens=50)
    calls = {"n": 0}
    step = fake_vllm.step

    def failing_step():
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("CUDA error: an illegal memory access")
        return step()

    fake_vllm.step = failing_step
    try:
        r = Recorder()
        p.submit([TokenRequest(0, np.array([1, 2]))], [r])
        assert r.ended.wait(10)
        assert isinstance(r.error, RuntimeError) and r.firsts == [[1]]
        assert p.drain(timeout_s=5)
    finally:
        p.close()


def test_vllm_refused_prompt_fails_alone_and_the_stats_show_who_joined(fake_vllm):
    add = fake_vllm.add_request

    def refusing_add(request_id, prompt, params):
        if len(prompt["prompt_token_ids"]) > 4:
            raise ValueError("prompt longer than max_model_len")
        add(request_id, prompt, params)

    fake_vllm.add_request = refusing_add
    p = vllm_predictor(max_new_tokens=20)
    try:
        a, b, c = Recorder(), Recorder(), Recorder()
        p.submit([TokenRequest(0, np.array([5, 6]))], [a])
        while not a.firsts:
            time.sleep(0.005)
        p.submit([TokenRequest(1, np.arange(9)), TokenRequest(2, np.array([3]))], [b, c])
        assert p.drain(timeout_s=10)
        assert isinstance(b.error, PredictorError) and "refused sample 1 (9 prompt tokens)" in str(b.error)
        assert a.result is not None and len(a.result) == 20 and c.result == [3] * 20
        stats = p.describe()
        assert (stats["requests"], stats["refused"], stats["joined_running_batch"], stats["peak_in_engine"]) == (
            3, 1, 1, 2)
        assert p.params.kwargs["detokenize"] is False  # the ids are what the run keeps
    finally:
        p.close()


def test_vllm_missing_is_a_clear_error():
    if "vllm" in sys.modules or __import__("importlib").util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    from mlharness.predictors.vllm import import_vllm

    with pytest.raises(PredictorError, match="pip install vllm"):
        import_vllm()


def test_toy_engine_ends_every_request_once_even_when_generate_raises():
    from mlharness.predictors.toys import TokenToyPredictor

    config = PredictorConfig(model_path=None, input_names=["p"], output_names=["t"], max_batchsize=4,
                             options={"fail_after": 2})
    p = TokenToyPredictor(config)
    p.load()
    try:
        streams = [Recorder() for _ in range(6)]
        p.submit([TokenRequest(i, np.arange(1, 6)) for i in range(6)], streams)
        assert p.drain(timeout_s=10)
        assert all(isinstance(s.error, PredictorError) and s.result is None for s in streams)
        assert all(s.firsts == [[1]] for s in streams)
    finally:
        p.close()


def test_token_responses_are_int32_and_keep_two_tokens():
    from pydantic import ValidationError

    from mlharness.manifest.schema import GenerationSpec, ResponseSpec
    from mlharness.predictors.generative import generation_config

    assert ResponseSpec(kind="tokens").element_type == "int32"
    with pytest.raises(ValidationError, match="int32 token ids"):
        ResponseSpec(kind="tokens", element_type="float32")
    with pytest.raises(ValidationError, match="greater than or equal to 2"):
        GenerationSpec(min_new_tokens=1)
    with pytest.raises(ValidationError, match="exceeds max_new_tokens"):
        GenerationSpec(max_new_tokens=4, min_new_tokens=8)
    g = generation_config(GenerationSpec(max_new_tokens=16, stop_token_ids=[7]))
    assert (g.max_new_tokens, g.min_new_tokens, g.do_sample, g.stop_token_ids) == (16, 2, False, [7])


class FakeLoadGen:
    """The two LoadGen calls the token SUT makes, recorded (unit test of the SUT's bookkeeping only)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def QuerySampleResponse(self, sample_id, ptr, size, n_tokens=None):  # noqa: N802 - LoadGen's name
        return (sample_id, size, n_tokens)

    def FirstTokenComplete(self, responses):  # noqa: N802
        self.events += [("first", r[0], r[1]) for r in responses]

    def QuerySamplesComplete(self, responses):  # noqa: N802
        self.events += [("complete", r[0], r[2]) for r in responses]


def settled(sut) -> None:
    """Every LoadGen call the token SUT handed to its calling thread so far has been made."""
    sut.stop_caller()
    sut.start_caller()


def test_token_sut_reports_first_tokens_and_completes_each_sample_once():
    from mlharness.kinds.tokens.sut import SampleStream, TokenSUT

    failures = []
    sut = TokenSUT([], store=None, scenario="Server", on_failure=failures.append)
    sut._lg = lg = FakeLoadGen()
    sut.start_caller()
    a, b = SampleStream(sut, 101, 1), SampleStream(sut, 102, 2)
    a.first(np.array([7], dtype=np.int32))
    a.first(np.array([7, 8], dtype=np.int32))  # at most once
    a.done(np.array([7, 8, 9], dtype=np.int32))
    a.done(np.array([7, 8, 9], dtype=np.int32))  # a second result is ignored
    a.fail(RuntimeError("late"))
    settled(sut)
    assert lg.events == [("first", 101, 4), ("complete", 101, 3)] and not failures
    b.first(np.array([5], dtype=np.int32))
    b.done(np.array([5], dtype=np.int32))  # one token: LoadGen would refuse n_tokens == 1
    settled(sut)
    assert lg.events[-1] == ("complete", 102, 0) and sut.halted
    assert "sample 2 (qsl_idx) got a response of 1 token(s)" in str(failures[0])
    assert sut.completed == 2


def test_token_sut_offline_sends_no_first_token_and_abandons_what_the_engine_holds():
    from mlharness.kinds.tokens.sut import SampleStream, TokenSUT

    sut = TokenSUT([], store=None, scenario="Offline")
    sut._lg = lg = FakeLoadGen()
    sut.start_caller()
    held = [SampleStream(sut, 200 + i, i) for i in range(3)]
    sut._outstanding.update(held)
    held[0].first(np.array([1], dtype=np.int32))
    held[0].fail(RuntimeError("engine died"))
    settled(sut)
    # the failure completes the other two at once; their late results are ignored
    assert sorted(e[1] for e in lg.events if e[0] == "complete") == [200, 201, 202]
    assert not [e for e in lg.events if e[0] == "first"]
    held[1].done(np.array([1, 2, 3], dtype=np.int32))
    settled(sut)
    assert len(lg.events) == 3 and sut.completed == 3
