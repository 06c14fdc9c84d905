"""A small OpenAI-compatible chat server with tool calls, for session runs: ``with ChatServer() as s: s.url``.

``POST /v1/chat/completions`` streams its answer: when the request offers tools and its last message is the user's,
one call of the first tool (arguments ``{"turn": N}``), else the text ``answer N`` in two fragments; N counts the
user and tool messages of the history, so every answer is known in advance. The usage chunk counts a prompt token
per 4 characters of the history and reports as cached the tokens of the previous request's history of the same
session (``X-Session-ID``) when this one extends it, as a prefix cache would. ``fail_at``: the request number
(1-based) answered with HTTP 500. ``delay_s``: a wait before each fragment. Every request is kept (``requests``)
with its arrival time. Bound to 127.0.0.1, stopped within seconds.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Self

from aiohttp import web


class LoopbackChat:
    """An aiohttp OpenAI-compatible chat server on 127.0.0.1 in a thread of its own (``/v1/models`` and
    ``/v1/chat/completions``), started by ``with`` and stopped within seconds; a subclass answers ``_chat``."""

    def __init__(self, model: str = "chat-model"):
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def __enter__(self) -> Self:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError


class ChatServer(LoopbackChat):
    def __init__(self, delay_s: float = 0.0, fail_at: int | None = None, model: str = "chat-model"):
        super().__init__(model)
        self.delay_s = delay_s
        self.fail_at = fail_at
        self._seen: dict[str, int] = {}  # session -> prompt characters of its last request

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body["messages"]
        self.requests.append({"t": time.perf_counter(), "body": body, "headers": dict(request.headers)})
        if self.fail_at is not None and len(self.requests) == self.fail_at:
            return web.json_response({"error": "injected failure"}, status=500)
        n = sum(1 for m in messages if m.get("role") in ("user", "tool"))
        chars = len(json.dumps(messages))
        session = request.headers.get("X-Session-ID", "")
        cached = self._seen.get(session, 0) // 4 if session else 0
        self._seen[session] = chars
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())

        if body.get("tools") and messages[-1].get("role") == "user":
            name = body["tools"][0]["function"]["name"]
            await send({"role": "assistant", "tool_calls": [{"index": 0, "id": f"call_{n}", "type": "function",
                                                             "function": {"name": name, "arguments": ""}}]})
            await send({"tool_calls": [{"index": 0, "function": {"arguments": json.dumps({"turn": n})}}]},
                       "tool_calls")
            completion = 6
        else:
            await send({"role": "assistant", "content": "answer "})
            await send({"content": str(n)}, "stop")
            completion = 2
        usage = {"prompt_tokens": chars // 4, "completion_tokens": completion,
                 "prompt_tokens_details": {"cached_tokens": cached}}
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def tiny_trace(n: int = 3, turns: int = 3, gap_s: float = 0.05, think_s: float = 0.01) -> list[dict[str, Any]]:
    """``n`` agentic sessions as dicts (``mlharness.kinds.sessions.input.as_session``'s form): a user's task, then
    tool results answering the recorded call, ``turns`` turns each; session k starts ``k * gap_s`` after the first."""
    tool = {"type": "function", "function": {"name": "read_file", "description": "read a file",
                                             "parameters": {"type": "object", "properties": {}}}}
    out = []
    for k in range(n):
        rows = [{"messages": [{"role": "user", "content": f"task {k}: fix the bug"}], "think_s": 0.0,
                 "recorded": {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "r0", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}}]
        for t in range(1, turns):
            rows.append({"messages": [{"role": "tool", "tool_call_id": f"r{t - 1}", "content": f"file {t}"}],
                         "think_s": think_s,
                         "recorded": {"role": "assistant", "content": None, "tool_calls": [
                             {"id": f"r{t}", "type": "function",
                              "function": {"name": "read_file", "arguments": "{}"}}]}})
        out.append({"id": f"s{k}", "system": "You are a coding agent.", "tools": [tool], "start_s": k * gap_s,
                    "turns": rows})
    return out
