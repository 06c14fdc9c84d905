"""The fake OpenAI-compatible server itself (see :mod:`mlharness.measurement.fake_openai`, which runs it): HTTP/1.1
over bare asyncio streams, one task per connection, chunks paced by loop timers.

``POST /v1/chat/completions`` takes chat messages with image parts: the messages are checked as a dataset's are
(:func:`mlharness.predictors.chat.parse_chat`: every data URL must decode as an image; HTTP 400 otherwise) and the
answer is the conversation's entry in the ``chat_answers`` table (keyed by ``ChatPrompt.key``; HTTP 400 for a
conversation it lacks), or without a table an echo naming the sha256 of every image's decoded bytes (what the
client sent, byte for byte) and the start of the last text part. The answer streams as ``delta.content`` chunks of up to
:data:`CHAT_CHARS` characters, one token each, then a usage chunk with ``completion_tokens``; with ``prefix_cache``
every answer after the first says that 8 of its prompt tokens came from the cache, as vLLM's does with prefix
caching on, and ``GET /metrics`` says ``enable_prefix_caching="True"`` (``"False"`` otherwise). With ``slots``, at
most that many answers stream at once; the others wait, before their first byte, for a free slot, as requests wait
for a batch slot of an accelerator (``peak_streams`` never exceeds it)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import resource
import signal
import time
from pathlib import Path
from typing import Any

DEFAULT_VOCAB = 256  # token ids stay below it: the tiny tokenizers of the random manifests have 512
BACKLOG = 16384
CHAT_CHARS = 1  # characters of a chat answer per streamed chunk (one token, as the oracles count bytes)
MAX_BODY = 64 << 20


def token_ids(prompt: Any, n: int, vocab: int = DEFAULT_VOCAB) -> list[int]:
    """The ``n`` token ids answering ``prompt`` (token ids, or text: its UTF-8 bytes): ``(seed + 7 i) mod (vocab
    - 3) + 3`` where ``seed`` is the sum of the prompt's ids (ids 0-2, often special, never appear)."""
    seed = sum(prompt.encode()) if isinstance(prompt, str) else sum(int(t) for t in prompt)
    return [(seed + 7 * i) % (vocab - 3) + 3 for i in range(n)]


class BadRequest(ValueError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _answer_length(body: dict[str, Any], tokens: int, eos_after: int | None) -> int:
    def whole(name: str) -> int | None:
        value = body.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadRequest(400, f"{name} must be a whole number >= 0, not {value!r}")
        return value

    cap, floor = whole("max_tokens"), whole("min_tokens") or 0
    n = tokens if cap is None else cap
    if eos_after is not None:
        n = min(n, max(eos_after, floor))
    return n


class FakeServer:
    """The server's state and its connection handler (see the module's docstring)."""

    def __init__(self, tokens: int = 128, delay_s: float = 0.01, eos_after: int | None = None,
                 vocab: int = DEFAULT_VOCAB, model: str = "fake-model", chat_answers: dict[str, str] | None = None,
                 prefix_cache: bool = False, slots: int | None = None):
        self.tokens, self.delay_s, self.eos_after, self.vocab, self.model = tokens, delay_s, eos_after, vocab, model
        self.chat_answers, self.prefix_cache, self.slots = chat_answers, prefix_cache, slots
        self._slots = asyncio.Semaphore(slots) if slots else None  # binds to the serving loop at first use
        self.streams = 0  # open now
        self.open_connections = 0
        self._next_id = 0
        self.reset()

    def reset(self) -> None:
        self.connections = self.requests = self.http_requests = self.tokens_sent = 0
        self.completed = self.aborted = self.chats = self.images = 0
        self.peak_streams = self.streams

    def stats(self) -> dict[str, Any]:
        return {"connections": self.connections, "open_connections": self.open_connections,
                "http_requests": self.http_requests, "requests": self.requests, "streams": self.streams,
                "peak_streams": self.peak_streams, "completed": self.completed, "aborted": self.aborted,
                "tokens": self.tokens_sent, "tokens_per_request": self.tokens, "chats": self.chats,
                "images": self.images, "eos_after": self.eos_after,
                "delay_s": self.delay_s, "slots": self.slots, "pid": os.getpid()}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_connections += 1
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, or sent a head too long to parse: nothing to answer
        finally:
            self.open_connections -= 1
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read and answer one request; False when the connection is to be closed."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # closed between requests
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            await _send(writer, 400, {"error": {"message": "bad request line", "code": 400}}, False)
            return False
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        self.http_requests += 1
        if "chunked" in headers.get("transfer-encoding", "").lower():
            await _send(writer, 411, {"error": {"message": "send the body with a Content-Length", "code": 411}}, False)
            return False
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY:
            await _send(writer, 413, {"error": {"message": f"body over {MAX_BODY} bytes", "code": 413}}, False)
            return False
        raw = await reader.readexactly(length) if length else b""
        path = target.split("?", 1)[0].rstrip("/")
        try:
            if path == "/v1/completions" and method == "POST":
                return await self._complete(raw, writer, keep)
            if path == "/v1/chat/completions" and method == "POST":
                return await self._chat(raw, writer, keep)
            if path == "/metrics" and method == "GET":
                await _send_text(writer, 'vllm:cache_config_info{block_size="16",enable_prefix_caching="'
                                 f'{self.prefix_cache}"}} 1.0\n', keep)
                return keep
            if path == "/v1/models" and method == "GET":
                await _send(writer, 200, {"object": "list", "data": [
                    {"id": self.model, "object": "model", "owned_by": "mlharness"}]}, keep)
            elif path == "/stats" and method == "GET":
                await _send(writer, 200, self.stats(), keep)
            elif path == "/stats/reset" and method == "POST":
                self.reset()
                await _send(writer, 200, self.stats(), keep)
            elif path in ("/v1/completions", "/v1/chat/completions", "/v1/models", "/stats", "/stats/reset"):
                raise BadRequest(405, f"{method} is not allowed on {path}")
            else:
                raise BadRequest(404, f"no such path: {path} (this server has /v1/completions, /v1/models, /stats)")
        except BadRequest as e:
            await _send(writer, e.status, {"error": {"message": str(e), "code": e.status}}, keep)
        return keep

    async def _complete(self, raw: bytes, writer: asyncio.StreamWriter, keep: bool) -> bool:
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise BadRequest(400, f"the body is not JSON: {e}") from e
        if not isinstance(body, dict) or "prompt" not in body:
            raise BadRequest(400, "the body must be a JSON object with a prompt")
        prompt = body["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if not (isinstance(prompt, str) or (isinstance(prompt, list) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt))):
            raise BadRequest(400, "prompt must be a string or a list of token ids (one prompt per request)")
        n = _answer_length(body, self.tokens, self.eos_after)
        ids = token_ids(prompt, n, self.vocab)
        self.requests += 1
        self._next_id += 1
        rid, created = f"cmpl-{self._next_id}", int(time.time())
        finish = "length" if body.get("max_tokens") is not None and n == body["max_tokens"] else "stop"
        usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n}
        if not body.get("stream"):
            await _send(writer, 200, {"id": rid, "object": "text_completion", "created": created, "model": self.model,
                                      "choices": [{"index": 0, "text": "".join(f" w{t}" for t in ids),
                                                   "token_ids": ids, "logprobs": None, "finish_reason": finish}],
                                      "usage": usage}, keep)
            self.tokens_sent += n
            self.completed += 1
            return keep
        head = (f'data: {{"id":"{rid}","object":"text_completion","created":{created},'
                f'"model":{json.dumps(self.model)},"choices":[{{"index":0,"text":" w')
        ends = ["null"] * (len(ids) - 1) + [json.dumps(finish)]  # finish_reason: on the last chunk only
        chunks = [_chunk(f'{head}{t}","token_ids":[{t}],"logprobs":null,"finish_reason":{end}}}]}}\n\n')
                  for t, end in zip(ids, ends, strict=False)]
        include = (body.get("stream_options") or {}).get("include_usage")
        return await self._stream(writer, keep, chunks, self._tail(rid, created, "text_completion",
                                                                   usage if include else None))

    def _tail(self, rid: str, created: int, kind: str, usage: dict[str, Any] | None) -> bytes:
        return b"".join([_chunk(f'data: {{"id":"{rid}","object":"{kind}","created":{created},"model":'
                                f'{json.dumps(self.model)},"choices":[],"usage":{json.dumps(usage)}}}\n\n')]
                        if usage is not None else []) + _chunk("data: [DONE]\n\n") + b"0\r\n\r\n"

    async def _chat(self, raw: bytes, writer: asyncio.StreamWriter, keep: bool) -> bool:
        from mlharness.errors import DatasetError
        from mlharness.predictors.chat import parse_chat

        try:
            body = json.loads(raw)
        except ValueError as e:
            raise BadRequest(400, f"the body is not JSON: {e}") from e
        if not isinstance(body, dict) or not body.get("stream"):
            raise BadRequest(400, "the body must be a JSON object asking for a stream (stream: true)")
        try:
            prompt = parse_chat(body.get("messages"), self.requests)
        except DatasetError as e:
            raise BadRequest(400, f"messages: {e}") from e
        images = [hashlib.sha256(p.data).hexdigest() for p in prompt.images]
        if self.chat_answers is not None:
            if prompt.key not in self.chat_answers:
                raise BadRequest(400, f"no answer for the conversation {prompt.key} in the table")
            answer = self.chat_answers[prompt.key]
        else:
            texts = [p.text for m in prompt.messages for p in m.parts if not hasattr(p, "data")]
            answer = f"images {' '.join(images) or 'none'}; text {texts[-1][:40] if texts else ''}"
        pieces = [answer[i:i + CHAT_CHARS] for i in range(0, len(answer), CHAT_CHARS)]
        pieces = pieces[:_answer_length(body, len(pieces), self.eos_after)]
        self.requests += 1
        self.chats += 1
        self.images += len(images)
        self._next_id += 1
        rid, created = f"chatcmpl-{self._next_id}", int(time.time())
        head = (f'data: {{"id":"{rid}","object":"chat.completion.chunk","created":{created},'
                f'"model":{json.dumps(self.model)},"choices":[{{"index":0,"delta":')
        ends = ["null"] * (len(pieces) - 1) + ['"stop"']
        chunks = [_chunk(f'{head}{{"role":"assistant","content":""}},"finish_reason":null}}]}}\n\n')]
        chunks += [_chunk(f'{head}{{"content":{json.dumps(t)}}},"finish_reason":{end}}}]}}\n\n')
                   for t, end in zip(pieces, ends, strict=False)]
        n_prompt = len(prompt.text) // CHAT_CHARS + 64 * len(images)
        usage: dict[str, Any] = {"prompt_tokens": n_prompt, "completion_tokens": len(pieces),
                                 "total_tokens": n_prompt + len(pieces)}
        if self.prefix_cache and self.chats > 1:
            usage["prompt_tokens_details"] = {"cached_tokens": min(8, n_prompt)}
        include = (body.get("stream_options") or {}).get("include_usage")
        return await self._stream(writer, keep, chunks, self._tail(rid, created, "chat.completion.chunk",
                                                                   usage if include else None))

    async def _stream(self, writer: asyncio.StreamWriter, keep: bool, chunks: list[bytes], tail: bytes) -> bool:
        if self._slots is None:
            return await self._stream_now(writer, keep, chunks, tail)
        async with self._slots:  # a request past the slots waits here, before its first byte
            return await self._stream_now(writer, keep, chunks, tail)

    async def _stream_now(self, writer: asyncio.StreamWriter, keep: bool, chunks: list[bytes], tail: bytes) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\n" + (b"" if keep else b"Connection: close\r\n") + b"\r\n")
        self.streams += 1
        self.peak_streams = max(self.peak_streams, self.streams)
        sent = 0
        try:
            if self.delay_s:
                sent = await self._paced(writer.transport, chunks)
                if sent < len(chunks):
                    self.aborted += 1
                    return False
                writer.write(tail)
            else:
                writer.write(b"".join(chunks) + tail)
                sent = len(chunks)
            await writer.drain()
            self.completed += 1
            return keep
        except ConnectionError:
            self.aborted += 1
            raise
        finally:
            self.tokens_sent += sent
            self.streams -= 1

    def _paced(self, transport: asyncio.BaseTransport, chunks: list[bytes]) -> asyncio.Future[int]:
        """Write one chunk every ``delay_s`` from loop timers, no coroutine woken per token (that halves the CPU a
        chunk costs); the future gives the number written (fewer when the client went away)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        written = 0

        def step() -> None:
            nonlocal written
            if transport.is_closing():
                done.set_result(written)
                return
            transport.write(chunks[written])  # type: ignore[attr-defined]
            written += 1
            if written == len(chunks):
                done.set_result(written)
            else:
                loop.call_later(self.delay_s, step)

        if chunks:
            loop.call_later(self.delay_s, step)
        else:
            done.set_result(0)
        return done


def _chunk(text: str) -> bytes:
    """``text`` as one chunk of a chunked body."""
    data = text.encode()
    return b"%x\r\n%b\r\n" % (len(data), data)


async def _send_text(writer: asyncio.StreamWriter, text: str, keep: bool) -> None:
    body = text.encode()
    close = "" if keep else "Connection: close\r\n"
    writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {len(body)}\r\n"
                 f"{close}\r\n".encode() + body)
    await writer.drain()


async def _send(writer: asyncio.StreamWriter, status: int, obj: Any, keep: bool) -> None:
    body = json.dumps(obj).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
              413: "Payload Too Large"}.get(status, "Error")
    close = "" if keep else "Connection: close\r\n"
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                 f"{close}\r\n".encode() + body)
    await writer.drain()


def raise_open_files_limit() -> int:
    """The soft limit on open files raised to the hard limit (each stream is a socket); returns the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


async def serve(server: FakeServer, port: int, port_file: Path | None) -> None:
    listener = await asyncio.start_server(server.handle, "127.0.0.1", port, backlog=BACKLOG)
    bound = listener.sockets[0].getsockname()[1]
    if port_file is not None:
        tmp = port_file.with_name(port_file.name + ".tmp")
        tmp.write_text(str(bound))
        tmp.replace(port_file)  # a reader never sees half a number
    print(f"PORT {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with listener:
        await stop.wait()
