"""The session player (mlharness/kinds/sessions/replay.py) and the OpenAI chat engine over a small local OpenAI-compatible
server: each turn's history, tool results keyed to the answer's calls, think times, the affinity header, cache-bust
salts, failures that end a session, streamed tool-call fragments, and the prefix-cache counts."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from mlharness.kinds.sessions.cache_metrics import QUERIES, client_hit_rate, hit_rate, parse, scrape
from mlharness.kinds.sessions.model import Session, Turn
from mlharness.kinds.sessions.openai_engine import OpenAIChatEngine
from mlharness.kinds.sessions.replay import ReplayOptions, SessionPlayer, salt

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}
ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'


class ChatServer:
    """``/v1/chat/completions`` streaming SSE: a tool call (its arguments in three pieces) where the last message is
    a user message containing ``CALL``, else a text answer in two pieces with a reasoning fragment; the usage chunk
    counts the request's characters as its prompt tokens and half of them as cached. ``FAIL`` in the last user
    message answers HTTP 500, ``SLOW`` waits 2 s before answering, ``CUT`` ends the stream without [DONE].
    ``/metrics`` reports the prompt and cached tokens as vLLM's prefix-cache counters. Every request is kept:
    (arrival time, body, headers); ``ends`` holds when each answer's last byte was written."""

    def __init__(self) -> None:
        self.requests: list[tuple[float, dict[str, Any], dict[str, str]]] = []
        self.ends: list[float] = []
        self.queries = self.hits = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ChatServer:
        self._thread.start()
        assert self._ready.wait(10), "the test server did not start"
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        from aiohttp import web

        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await asyncio.wait_for(self._stop.wait(), 120)  # bounded: a test that forgets to stop it
        except asyncio.TimeoutError:
            pass
        await runner.cleanup()

    async def _metrics(self, request: Any) -> Any:
        from aiohttp import web

        text = (f'# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{{engine="0",'
                f'model_name="tiny"}} {float(self.queries)}\nvllm:prefix_cache_hits_total{{engine="0",'
                f'model_name="tiny"}} {float(self.hits)}\nvllm:num_requests_running{{engine="0"}} 0.0\n')
        return web.Response(text=text)

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        arrived = time.perf_counter()
        body = await request.json()
        self.requests.append((arrived, body, dict(request.headers)))
        n = len(self.requests)
        last = body["messages"][-1]
        said = last.get("content") if last.get("role") == "user" else ""
        if "FAIL" in (said or ""):
            return web.Response(status=500, text="the model crashed")
        if "SLOW" in (said or ""):
            await asyncio.sleep(2)
        prompt = len(json.dumps(body["messages"]))
        self.queries += prompt
        self.hits += prompt // 2
        if "JSON" in (said or ""):  # a server that ignores stream: true
            self.ends.append(time.perf_counter())
            return web.json_response({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "", "reasoning": "plain", "tool_calls": [
                    {"id": "j1", "type": "function", "function": {"name": "get_weather", "arguments": ARGUMENTS}}]}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 9}})
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)

        async def event(obj: Any) -> None:
            await r.write(f"data: {json.dumps(obj)}\n\n".encode())

        def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": f"c{n}", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}

        if "CALL" in (said or ""):
            call = f"call_srv_{n}"
            await event(delta({"role": "assistant", "tool_calls": [
                {"index": 0, "id": call, "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}))
            for piece in (ARGUMENTS[:9], ARGUMENTS[9:20], ARGUMENTS[20:]):
                await event(delta({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
            await event(delta({}, "tool_calls"))
        else:
            await event(delta({"role": "assistant", "reasoning_content": "thinking "}))
            await event(delta({"content": f"answer {n} "}))
            await event(delta({"content": "done"}, "stop"))
        if "CUT" in (said or ""):
            self.ends.append(time.perf_counter())
            return r  # no usage, no [DONE]
        await event({"id": f"c{n}", "choices": [], "usage": {
            "prompt_tokens": prompt, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": prompt // 2}}})
        await r.write(b"data: [DONE]\n\n")
        self.ends.append(time.perf_counter())
        return r


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def conversation(sid: str = "s1", think: float = 0.0) -> Session:
    """Five turns: a question, another, one that asks for a tool, the tool's result, thanks."""
    recorded_call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "rec_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}
    return Session(id=sid, system="You are terse.", tools=(WEATHER,), turns=(
        Turn((user("hello"),), recorded={"role": "assistant", "content": "recorded 0"}),
        Turn((user("more"),), think_s=think, recorded={"role": "assistant", "content": "recorded 1"}),
        Turn((user("CALL the weather tool"),), think_s=think, recorded=recorded_call),
        Turn(({"role": "tool", "tool_call_id": "rec_1", "content": "12 C"},), think_s=think,
             recorded={"role": "assistant", "content": "recorded 3"}),
        Turn((user("thanks"),), think_s=think, max_tokens=7, recorded={"role": "assistant", "content": "recorded 4"}),
    ))


def play(server: ChatServer, sessions: list[Session], **options: Any):
    async def go():
        engine = OpenAIChatEngine(server.url, "tiny", api_key="k", extra_body={"temperature": 0.0})
        player = SessionPlayer(engine, ReplayOptions(**options))
        try:
            return [await player.play(s, i) for i, s in enumerate(sessions)]
        finally:
            await engine.aclose()

    return asyncio.run(asyncio.wait_for(go(), 30))


def test_generated_history_carries_every_answer_and_keys_tool_results_to_the_answers_calls(server):
    (record, answers), = play(server, [conversation()], affinity_header="X-Session-ID", extra_body={"seed": 3})
    assert record.ok and len(record.turns) == 5 and len(answers) == 5
    bodies = [body for _, body, _ in server.requests]
    system = {"role": "system", "content": "You are terse."}
    assert bodies[0]["messages"] == [system, user("hello")]
    assert bodies[1]["messages"] == [system, user("hello"), {"role": "assistant", "content": "answer 1 done"},
                                     user("more")]
    # the streamed tool call, its arguments reassembled from three pieces, under the server's id
    call = answers[2].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("call_srv_3", "get_weather", ARGUMENTS)
    assert answers[2].content is None and answers[2].finish_reason == "tool_calls"
    assert answers[0].reasoning == "thinking " and answers[0].content == "answer 1 done"
    assert bodies[3]["messages"][-2:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_srv_3", "type": "function", "function": {"name": "get_weather", "arguments": ARGUMENTS}}]},
        {"role": "tool", "tool_call_id": "call_srv_3", "content": "12 C"}]
    # every turn holds the whole history before it: each request extends the one before with its answer
    for k in range(1, 5):
        assert bodies[k]["messages"][:len(bodies[k - 1]["messages"])] == bodies[k - 1]["messages"]
        assert len(bodies[k]["messages"]) == len(bodies[k - 1]["messages"]) + 2
    assert [r.tool_calls for r in record.turns] == [0, 0, 1, 0, 0] and not any(r.diverged for r in record.turns)
    assert all(b["tools"] == [WEATHER] and b["tool_choice"] == "auto" and b["stream"]
               and b["stream_options"] == {"include_usage": True} for b in bodies)
    assert [b["max_tokens"] for b in bodies] == [1024, 1024, 1024, 1024, 7]
    assert all(b["seed"] == 3 and b["temperature"] == 0.0 and b["model"] == "tiny" for b in bodies)
    assert all(h.get("X-Session-ID") == "s1" and h.get("Authorization") == "Bearer k" for _, _, h in server.requests)
    first = record.turns[0]
    assert first.prompt_tokens == len(json.dumps(bodies[0]["messages"])) and first.completion_tokens == 3
    assert first.cached_tokens == first.prompt_tokens // 2
    assert all(t.sent <= t.first <= t.done for t in record.turns)


def test_recorded_history_replays_the_traces_answers_whatever_the_engine_said(server):
    (record, answers), = play(server, [conversation()], history="recorded")
    assert record.ok and answers[0].content == "answer 1 done"
    last = server.requests[-1][1]["messages"]
    assert [m.get("content") for m in last if m["role"] == "assistant"] == [
        "recorded 0", "recorded 1", None, "recorded 3"]
    assert last[6:8] == [conversation().turns[2].recorded, {"role": "tool", "tool_call_id": "rec_1", "content": "12 C"}]
    assert not any(r.diverged for r in record.turns)


def test_an_answer_that_calls_no_tool_is_replaced_by_the_recorded_call_and_marked_diverged(server):
    s = conversation()
    s = Session(id="d", system=s.system, tools=s.tools,  # turn 2 no longer asks for the tool: the answer is text
                turns=(s.turns[0], s.turns[1], Turn((user("weather?"),), recorded=s.turns[2].recorded), *s.turns[3:]))
    (record, answers), = play(server, [s])
    assert record.ok and not answers[2].tool_calls
    messages = server.requests[3][1]["messages"]
    assert messages[-2:] == [s.turns[2].recorded, {"role": "tool", "tool_call_id": "rec_1", "content": "12 C"}]
    assert [r.diverged for r in record.turns] == [False, False, True, False, False]


def test_think_times_are_honoured_within_5_ms(server):
    thinks = (0.0, 0.05, 0.08, 0.1)
    s = Session(id="t", turns=tuple(Turn((user(f"q{i}"),), think_s=t) for i, t in enumerate(thinks)))
    (record, _), = play(server, [s])
    assert record.ok
    for k in (1, 2, 3):  # the server saw the waits: a turn arrives no sooner than its think time after the answer
        assert server.requests[k][0] - server.ends[k - 1] >= thinks[k] - 0.005
        assert record.turns[k].sent - record.turns[k - 1].done == pytest.approx(record.turns[k].waited_s)
    (scaled, _), = play(server, [s], think_scale=0.5)
    asked = [*thinks, *(t / 2 for t in thinks)]
    waits = [r.waited_s for r in (*record.turns, *scaled.turns)]
    assert [r.think_s for r in (*record.turns, *scaled.turns)] == asked
    # never early, and within 5 ms; on 2 cores shared by many processes the host may deschedule this one for longer
    # than that whatever the player does, so one wait of the eight may be late (by less than 50 ms)
    late = [w - t for t, w in zip(asked, waits, strict=True)]
    assert all(-0.001 < d < 0.05 for d in late), late
    assert sum(d < 0.005 for d in late) >= len(late) - 1, late


def test_cache_bust_makes_every_sessions_prefix_distinct_and_keeps_it_within_a_session(server):
    sessions = [Session(id=f"s{i}", system="shared system prompt", turns=(Turn((user("a"),)), Turn((user("b"),))))
                for i in range(3)]
    results = play(server, sessions, cache_bust=True, affinity_header="X-Session-ID", salt_seed=7)
    assert all(r.ok for r, _ in results)
    firsts = [body["messages"][0]["content"] for _, body, _ in server.requests]
    per_session = [firsts[0:2], firsts[2:4], firsts[4:6]]
    assert all(a == b for a, b in per_session)  # a session's own turns share their prefix (the cache may reuse it)
    assert len({p[0] for p in per_session}) == 3 and "shared system prompt" not in firsts
    assert all(f.endswith("shared system prompt") for f in firsts)
    assert per_session[1][0].startswith(f"[salt: {salt(7, 's1')}]")
    assert server.requests[2][2]["X-Session-ID"] == f"s1-{salt(7, 's1')}"
    # deterministic per (seed, session, repeat), and different when any of them changes
    assert salt(7, "s1") == salt(7, "s1", 0) != salt(8, "s1") and salt(7, "s1", 1) != salt(7, "s1")
    no_system = Session(id="u", turns=(Turn((user("a"),)),))
    play(server, [no_system, no_system], cache_bust=True)  # no system prompt: the first user message is salted
    assert server.requests[-2][1]["messages"][0]["content"].endswith("\n\na")
    assert server.requests[-2][1]["messages"][0] != server.requests[-1][1]["messages"][0]  # a repeat is salted anew

    async def two_players():  # a run's players share its options: a session played by each is two repeats
        engines = [OpenAIChatEngine(server.url, "tiny") for _ in range(2)]
        options = ReplayOptions(cache_bust=True)
        try:
            for engine in engines:
                await SessionPlayer(engine, options).play(no_system)
        finally:
            for engine in engines:
                await engine.aclose()

    asyncio.run(asyncio.wait_for(two_players(), 20))
    assert [r[1]["messages"][0]["content"][:20] for r in server.requests[-2:]] == [
        f"[salt: {salt(0, 'u', 0)}]", f"[salt: {salt(0, 'u', 1)}]"]


@pytest.mark.parametrize("trigger, options, error", [
    ("FAIL now", {}, "HTTP 500: the model crashed"),
    ("SLOW now", {"turn_timeout_s": 0.3}, "no answer within 0.3 s (turn_timeout_s)"),
    ("CUT now", {}, "the stream ended without data: [DONE]"),
])
def test_a_failed_turn_ends_the_session_with_its_error_and_no_later_turn_is_sent(server, trigger, options, error):
    s = Session(id="f", turns=(Turn((user("a"),)), Turn((user(trigger),)), Turn((user("c"),))))
    (record, answers), = play(server, [s], **options)
    assert not record.ok and record.finished is None and error in record.error
    assert record.error.startswith("session f, turn 1:")
    assert len(server.requests) == 2 and len(record.turns) == 2 and len(answers) == 1
    assert record.turns[1].done is None and error in record.turns[1].error
    if trigger.startswith("FAIL"):
        assert f"endpoint {server.url}/v1/chat/completions, session f turn 1" in record.error


def test_an_answer_not_streamed_is_read_whole(server):
    (record, answers), = play(server, [Session(id="j", turns=(Turn((user("JSON please"),)),))])
    assert record.ok and answers[0].reasoning == "plain" and answers[0].finish_reason == "tool_calls"
    assert [(c.id, c.arguments) for c in answers[0].tool_calls] == [("j1", ARGUMENTS)]
    assert record.turns[0].completion_tokens == 9 and record.turns[0].cached_tokens is None
    assert record.turns[0].sent < record.turns[0].first <= record.turns[0].done


def test_a_bug_in_an_engine_is_raised_not_recorded():
    class Broken:
        name = "broken"

        async def answer(self, request, timing):
            raise KeyError("a bug")

    with pytest.raises(KeyError):
        asyncio.run(SessionPlayer(Broken()).play(Session(id="b", turns=(Turn((user("a"),)),))))


def test_prefix_cache_hit_rates_from_usage_and_from_the_servers_metrics(server):
    before = scrape(server.url + "/v1")
    results = play(server, [conversation("a"), conversation("b")])
    after = scrape(server.url)
    client = client_hit_rate([r for r, _ in results])
    assert before[QUERIES] == 0 and after[QUERIES] > 0
    assert client == pytest.approx(hit_rate(before, after)) and 0.45 < client <= 0.5
    assert hit_rate(before, before) is None and hit_rate(None, after) is None
    assert scrape("http://127.0.0.1:9") is None  # nothing listens there


def test_metrics_parse_sums_label_sets_and_ignores_other_counters():
    page = ("# HELP vllm:prefix_cache_hits Prefix cache hits\n# TYPE vllm:prefix_cache_hits_total counter\n"
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 30.0\n'
            'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 10.0\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0\n'
            'vllm:prefix_cache_hits_created{engine="0"} 1.7e9\nvllm:num_requests_waiting 3.0\n')
    got = parse(page)
    assert got["vllm:prefix_cache_hits_total"] == 40.0 and got[QUERIES] == 100.0
    assert "vllm:num_requests_waiting" not in got and parse("nothing here") is None


def test_replay_options_refuse_what_cannot_be_played():
    from mlharness.errors import PredictorError

    for bad in ({"history": "mine"}, {"think_scale": -1.0}, {"turn_timeout_s": 0}, {"max_tokens": 0}):
        with pytest.raises(PredictorError, match="replay option"):
            ReplayOptions(**bad)


def test_the_openai_predictors_chat_engine_plays_at_its_endpoint_with_its_model_and_key(server, monkeypatch):
    from mlharness.predictors import PREDICTORS
    from mlharness.predictors.base import PredictorConfig
    from mlharness.predictors.generative import GenerationConfig

    monkeypatch.setenv("SESSION_TEST_KEY", "secret")
    p = PREDICTORS.get("openai")(PredictorConfig(
        model_path=None, input_names=[], output_names=[], generation=GenerationConfig(max_new_tokens=16),
        options={"endpoints": [server.url], "model": "served", "api_key_env": "SESSION_TEST_KEY",
                 "extra_body": {"seed": 5}}))
    p.load()
    try:
        engine = p.chat_engine()

        async def go():
            try:
                return await SessionPlayer(engine).play(Session(id="p", turns=(Turn((user("a"),)),)))
            finally:
                await engine.aclose()

        record, answers = asyncio.run(asyncio.wait_for(go(), 20))
    finally:
        p.close()
    assert record.ok and answers[0].content == "answer 1 done"
    _, body, headers = server.requests[0]
    assert body["model"] == "served" and body["seed"] == 5 and body["temperature"] == 0.0
    assert headers["Authorization"] == "Bearer secret"
