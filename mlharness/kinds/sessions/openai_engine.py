"""A session engine over an OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM serve, SGLang, llama.cpp's
server, hosted APIs).

Each turn is one streamed request (``stream: true``, ``stream_options.include_usage`` so the last chunk carries
the usage: prompt, completion and cached prompt tokens), with the turn's whole history, its ``tools`` where it
offers some, its ``max_tokens`` and headers (the session-affinity one). The answer is put together from the
streamed deltas: ``content``, ``reasoning_content`` (or ``reasoning``, as newer vLLM names it), and
``tool_calls`` fragments, keyed by their ``index``: the first fragment of a call carries its id and name, its
``arguments`` arrive in pieces that are joined in order. ``timing.first()`` is called at the first fragment of any
of the three. The Server-Sent Events are parsed as the ``openai`` predictor parses them
(:mod:`mlharness.predictors.openai.sse`: bounded lines and events).

A failure raises :class:`~mlharness.errors.PredictorError` naming the endpoint, the session and the turn: an HTTP
status other than 200 (with the start of its body), an event that is not a JSON object, an error event, a stream
that ended without ``data: [DONE]`` (the connection was cut: a partial answer is never an answer), no complete
answer within ``timeout_s``, or a connection that failed. Nothing is retried: a turn sent twice would be timed
twice, and the session player ends the session at its first failed turn. A server that answers
``application/json`` instead of a stream (one that ignores ``stream``) is read as a whole answer.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from mlharness.errors import PredictorError
from mlharness.kinds.sessions.engine import Timing, TurnRequest
from mlharness.kinds.sessions.model import Answer, ToolCall
from mlharness.predictors.openai.http import MAX_LINE, LineTooLong
from mlharness.predictors.openai.sse import SSEParser

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_CONNECTIONS = 64
CONNECT_TIMEOUT_S = 30.0
REFUSAL_BYTES = 500  # of a refusal's body, quoted in its error
MAX_JSON_BYTES = 64 << 20  # a non-streamed answer's body
KEY_ENV = "OPENAI_API_KEY"  # the openai predictor's default options.api_key_env


class _Answer:
    """What a turn's stream has brought so far."""

    def __init__(self, timing: Timing):
        self.timing = timing
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}  # index -> {"id", "name", "arguments": [pieces]}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False

    def choice(self, choice: dict[str, Any]) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta") or choice.get("message") or {}
        if not isinstance(delta, dict):
            raise ValueError(f"a delta that is not an object: {delta!r}")
        moved = False
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.content.append(text)
            moved = True
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str) and thought:
            self.reasoning.append(thought)
            moved = True
        for fragment in delta.get("tool_calls") or []:
            self.tool_fragment(fragment)
            moved = True
        if moved:
            self.timing.first()

    def tool_fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise ValueError(f"a tool-call fragment that is not an object: {fragment!r}")
        index = fragment.get("index", len(self.calls))
        if isinstance(index, bool) or not isinstance(index, int):
            raise ValueError(f"a tool-call fragment whose index is {index!r}")
        call = self.calls.setdefault(index, {"id": None, "name": None, "arguments": []})
        if fragment.get("id") and not call["id"]:
            call["id"] = str(fragment["id"])
        function = fragment.get("function") or {}
        if function.get("name") and not call["name"]:
            call["name"] = str(function["name"])
        pieces = function.get("arguments")
        if isinstance(pieces, str):
            call["arguments"].append(pieces)
        elif pieces is not None:  # a whole object (some servers send parsed arguments)
            call["arguments"].append(json.dumps(pieces))

    def answer(self, turn: int) -> Answer:
        calls = tuple(ToolCall(id=c["id"] or f"call_{turn}_{i}", name=c["name"] or "",
                               arguments="".join(c["arguments"]))
                      for i, c in sorted(self.calls.items()))
        usage = self.usage or {}
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return Answer(content="".join(self.content) if self.content or not calls else None, tool_calls=calls,
                      reasoning="".join(self.reasoning) or None, prompt_tokens=_count(usage.get("prompt_tokens")),
                      completion_tokens=_count(usage.get("completion_tokens")), cached_tokens=_count(cached),
                      finish_reason=self.finish_reason)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class OpenAIChatEngine:
    """:class:`~mlharness.kinds.sessions.engine.ChatEngine` over ``base_url`` (with or without ``/v1``). Its aiohttp
    connection pool is opened in the event loop of the first turn it answers (every later turn must come from that
    loop) and closed by :meth:`aclose`."""

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 extra_body: dict[str, Any] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_connections: int = DEFAULT_CONNECTIONS):
        base = base_url.rstrip("/")
        self.base = base if base.endswith("/v1") else f"{base}/v1"
        self.url = f"{self.base}/chat/completions"
        self.model = model
        self.extra_body = dict(extra_body or {})
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._session: Any = None

    def body(self, request: TurnRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": request.messages, "stream": True,
                                "stream_options": {"include_usage": True}, "max_tokens": request.max_tokens}
        if request.tools:
            # "auto" is the API's default when tools are offered; stated, as the BFCL reference sends it, since
            # some servers default to "none" and would then never call a tool
            body["tools"] = request.tools
            body["tool_choice"] = "auto"
        body.update(self.extra_body)
        body.update(request.extra_body)
        return body

    def _open(self) -> Any:
        import aiohttp

        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.max_connections)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S))
        return self._session

    async def answer(self, request: TurnRequest, timing: Timing) -> Answer:
        import aiohttp

        where = f"endpoint {self.url}, session {request.session_id} turn {request.turn}"
        data = json.dumps(self.body(request)).encode()
        state = _Answer(timing)
        try:
            await asyncio.wait_for(self._stream(data, request.headers, state, where), self.timeout_s)
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise PredictorError(f"{where}: no complete answer within {self.timeout_s:g} s") from e
        except aiohttp.ClientError as e:
            raise PredictorError(f"{where}: unreachable, or the connection was cut ({type(e).__name__}: {e})") from e
        except LineTooLong as e:
            raise PredictorError(f"{where}: a stream with {e}") from e
        return state.answer(request.turn)

    async def _stream(self, data: bytes, headers: dict[str, str], state: _Answer, where: str) -> None:
        async with self._open().post(self.url, data=data, headers=headers) as r:
            if r.status != 200:
                text = await r.content.read(REFUSAL_BYTES)
                raise PredictorError(f"{where}: HTTP {r.status}: {text.decode(errors='replace')}")
            if r.content_type == "application/json":  # a server that ignored stream: true
                whole = await r.content.read(MAX_JSON_BYTES)
                self._take(whole, state, where)
                if not state.usage and not state.finish_reason:
                    raise PredictorError(f"{where}: a JSON answer that is not a chat completion: {whole[:200]!r}")
                state.done = True
                return
            parser = SSEParser(MAX_LINE)
            async for chunk in r.content.iter_any():
                for event in parser.feed(chunk):
                    self._take(event, state, where)
                if state.done:
                    return  # the connection goes back to the pool once the body is released
            for event in parser.end():
                self._take(event, state, where)
        if not state.done:
            raise PredictorError(f"{where}: the stream ended without data: [DONE] (the connection was closed "
                                 f"mid-answer, after {len(state.content)} content fragment(s))")

    def _take(self, data: bytes, state: _Answer, where: str) -> None:
        if state.done:
            return
        if data.strip() == b"[DONE]":
            state.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError as e:
            raise PredictorError(f"{where}: an event that is not JSON ({e}): {data[:200]!r}") from e
        if not isinstance(chunk, dict):
            raise PredictorError(f"{where}: an event that is not a chat completion chunk: {data[:200]!r}")
        if "error" in chunk:
            raise PredictorError(f"{where}: the server reported an error: {chunk['error']}")
        if isinstance(chunk.get("usage"), dict):
            state.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise PredictorError(f"{where}: a chunk whose choices are not a list: {data[:200]!r}")
        try:
            for choice in choices[:1]:  # one answer asked for (n = 1)
                if not isinstance(choice, dict):
                    raise ValueError(f"a choice that is not an object: {choice!r}")
                state.choice(choice)
        except ValueError as e:
            raise PredictorError(f"{where}: {e}") from e

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def for_predictor(predictor: Any) -> OpenAIChatEngine:
    """The engine of a loaded ``openai`` predictor (its ``chat_engine()``): its first endpoint, served model, API
    key (``options.api_key_env``), sampling (greedy unless its generation samples), extra request fields and
    whole-request deadline."""
    g = predictor.generation
    key = os.environ.get(predictor.config.options.get("api_key_env", KEY_ENV))
    sampling = {"temperature": g.temperature if g.do_sample else 0.0, "top_p": g.top_p if g.do_sample else 1.0}
    return OpenAIChatEngine(predictor.endpoints[0].base, predictor.model, api_key=key,
                            extra_body={**sampling, **predictor.extra_body}, timeout_s=predictor.deadline_s,
                            max_connections=min(predictor.concurrency, 1024))
