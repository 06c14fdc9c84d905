"""The session player and the OpenAI chat engine against a real vLLM server (the CPU build) with prefix caching on:
multi-turn sessions replayed, and the client's prefix-cache hit rate (each answer's ``cached_tokens`` over its
``prompt_tokens``) agreeing with vLLM's own ``/metrics`` counters over the replay. Skips unless
MLHARNESS_VLLM_PYTHON names vLLM's Python (.ci/run sets it)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from mlharness.sessions.cache_metrics import HITS, QUERIES, client_hit_rate, hit_rate, scrape
from mlharness.sessions.model import Session, Turn
from mlharness.sessions.openai_engine import OpenAIChatEngine
from mlharness.sessions.replay import ReplayOptions, SessionPlayer
from tests.helpers.vllm_server import vllm_server

VLLM_PYTHON = os.environ.get("MLHARNESS_VLLM_PYTHON")
pytestmark = [pytest.mark.slow,  # about a minute: the server's start-up (imports) on 2 cores
              pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).is_file(),
                                 reason="vLLM is not installed (.ci/run installs it and sets MLHARNESS_VLLM_PYTHON)")]
# the random Llama's tokenizer has no chat template: a plain one, every message on its own line
TEMPLATE = ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>{{ m['content'] }}<|eot_id|>"
            "{% endfor %}<|start_header_id|>assistant<|end_header_id|>")
SYSTEM = "You answer questions about the weather in short sentences. " * 8  # a prefix the sessions share


@pytest.fixture(scope="module")
def served(shared_cache, tmp_path_factory):
    """vLLM serving llama3.1-8b-random's checkpoint with prefix caching on, in blocks of 32 tokens (the CPU
    default of 128 would leave these short prompts without a full block to reuse), cached tokens in usage."""
    from mlharness.tasks.cnndm.models import ensure_random_llama

    model = ensure_random_llama(shared_cache / "generated" / "llama3.1-8b-random" / "llama_random")
    template = tmp_path_factory.mktemp("vllm-chat") / "template.jinja"
    template.write_text(TEMPLATE)
    with vllm_server(VLLM_PYTHON, model, shared_cache, "vllm-sessions", "--max-model-len", "2048",
                     "--enable-prefix-caching", "--block-size", "32", "--enable-prompt-tokens-details",
                     "--chat-template", str(template)) as url:
        yield url


def sessions() -> list[Session]:
    questions = ("What is the weather in Paris today?", "And tomorrow, will it rain there?",
                 "Should I take an umbrella then?")
    return [Session(id=f"s{i}", system=SYSTEM,
                    turns=tuple(Turn(({"role": "user", "content": f"{q} (city {i})"},), think_s=0.01)
                                for q in questions))
            for i in range(3)]


def test_replayed_sessions_hit_the_prefix_cache_as_vllms_metrics_count_it(served):
    async def go():
        engine = OpenAIChatEngine(served, "tiny", extra_body={"temperature": 0.0, "seed": 0}, timeout_s=120)
        player = SessionPlayer(engine, ReplayOptions(max_tokens=16, turn_timeout_s=120))
        try:
            return [await player.play(s, i) for i, s in enumerate(sessions())]
        finally:
            await engine.aclose()

    before = scrape(served)
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
        after = scrape(served)
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
