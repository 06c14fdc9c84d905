"""An OpenAI-compatible chat server whose answers a test scripts: ``with ScriptedChat(reply) as s: s.url``, where
``reply(prompt) -> str`` gets the last user message and returns the answer's text (streamed as one ``delta.content``
chunk, then a usage chunk counting a completion token per word). Every request is kept (``requests``, with its
prompt). Bound to 127.0.0.1, stopped within seconds; a reply function that raises answers HTTP 500."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web


class ScriptedChat:
    def __init__(self, reply: Callable[[str], str], model: str = "chat-model"):
        self.reply, self.model = reply, model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def __enter__(self) -> ScriptedChat:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def prompts(self, starting: str = "") -> list[str]:
        with self._lock:
            return [r["prompt"] for r in self.requests if r["prompt"].startswith(starting)]

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
        body = await request.json()
        prompt = str(body["messages"][-1].get("content") or "")
        with self._lock:
            self.requests.append({"body": body, "prompt": prompt})
        try:
            text = self.reply(prompt)
        except Exception as e:  # noqa: BLE001 - the test's script failing is the client's HTTP 500
            return web.json_response({"error": f"{type(e).__name__}: {e}"}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": max(1, len(text.split()))}
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
