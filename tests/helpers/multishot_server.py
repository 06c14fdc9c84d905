"""An OpenAI-compatible chat server whose answers a test scripts: ``with ScriptedChat(reply) as s: s.url``, where
``reply(prompt) -> str`` gets the last user message and returns the answer's text (streamed as one ``delta.content``
chunk, then a usage chunk counting a completion token per word). Every request is kept (``requests``, with its
prompt). Bound to 127.0.0.1, stopped within seconds; a reply function that raises answers HTTP 500."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from aiohttp import web

from tests.helpers.session_server import LoopbackChat


class ScriptedChat(LoopbackChat):
    def __init__(self, reply: Callable[[str], str], model: str = "chat-model"):
        super().__init__(model)
        self.reply = reply
        self._lock = threading.Lock()

    def prompts(self, starting: str = "") -> list[str]:
        with self._lock:
            return [r["prompt"] for r in self.requests if r["prompt"].startswith(starting)]

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
