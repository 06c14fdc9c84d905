"""A stand-in OpenAI-compatible completions server for unit tests of the ``openai`` predictor (balancing, retries,
the tokenizing fallback, errors). The predictor's test against a real serving engine is tests/test_openai_server.py.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-stream (the predictor's deadline, close) is what some tests do


class StubServer:
    """``/v1/completions`` streaming ``n_tokens`` tokens: token i of a prompt is ``(sum(prompt) + i) % 50 + 3``.

    ``ids``: send ``token_ids`` with each chunk (else text only: token t is the word ``w<t>``); ``delay_s`` before
    each chunk; ``fail_after``: send an error event after that many chunks; ``status``: answer with that HTTP
    status instead of a stream. Every request's JSON body and headers are kept in ``requests``."""

    def __init__(self, *, ids: bool = True, n_tokens: int = 5, delay_s: float = 0.0, fail_after: int | None = None,
                 status: int = 200, model: str = "stub-model", text_prompts_only: bool = False):
        self.ids, self.n_tokens, self.delay_s, self.fail_after, self.status = ids, n_tokens, delay_s, fail_after, status
        self.model = model
        self.text_prompts_only = text_prompts_only  # answer 400 to a prompt of token ids, as some servers do
        self.requests: list[dict[str, Any]] = []
        self.model_queries = 0  # GET /v1/models
        self.active = 0
        self.peak = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                stub.model_queries += 1
                body = json.dumps({"object": "list", "data": [{"id": stub.model, "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub._lock:
                    stub.requests.append({"body": body, "headers": dict(self.headers)})
                    stub.active += 1
                    stub.peak = max(stub.peak, stub.active)
                try:
                    stub.answer(self, body)
                finally:
                    with stub._lock:
                        stub.active -= 1

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def tokens(prompt: list[int], n: int) -> list[int]:
        return [(sum(prompt) + i) % 50 + 3 for i in range(n)]

    def answer(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        status = 400 if self.text_prompts_only and isinstance(body["prompt"], list) else self.status
        if status != 200:
            data = json.dumps({"error": {"message": "refused", "code": status}}).encode()
            h.send_response(status)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        prompt = body["prompt"] if isinstance(body["prompt"], list) else [len(body["prompt"])]
        for i, t in enumerate(self.tokens(prompt, min(self.n_tokens, body["max_tokens"]))):
            time.sleep(self.delay_s)
            if self.fail_after is not None and i == self.fail_after:
                event: dict[str, Any] = {"error": {"message": "engine died", "code": 500}}
            else:
                choice: dict[str, Any] = {"index": 0, "text": f" w{t}", "finish_reason": None}
                if self.ids:
                    choice["token_ids"] = [t]
                event = {"id": "cmpl-1", "object": "text_completion", "choices": [choice]}
            h.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            h.wfile.flush()
            if "error" in event:
                return
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
