"""Framework ``openai``: generation by any OpenAI-compatible HTTP server that streams (vLLM serve, SGLang, TGI,
llama.cpp server, hosted APIs).

Manifest use::

    framework:
      name: openai
      options: {endpoints: ["http://127.0.0.1:8000"], model: served-name, api_key_env: OPENAI_API_KEY,
                deadline_s: 600, tokenizer: /path/to/checkpoint, prompt: tokens}

or ``mlharness run --endpoint URL`` (repeatable) with a generative manifest. Each sample is one streamed
``/v1/completions`` request (Server-Sent Events). Requests go to the endpoint with the fewest outstanding ones;
one that fails before its first token (connection refused, a 5xx, a timeout) is sent once more to another
endpoint, as the gRPC agents' requests are; any other failure fails that sample's stream. ``deadline_s`` bounds
each request from its start to its last token.

Token ids come from the server when it returns them (vLLM's ``return_token_ids``: each chunk's ``token_ids``;
or logprobs tokens of the form ``token_id:N``); otherwise the streamed text is tokenized with the manifest's
tokenizer (``tokenizer``: a local folder for ``transformers.AutoTokenizer``): the first text delta gives the
first token(s), and the rest of the text is tokenized after them, so the first tokens always prefix the answer.
The prompt is sent as token ids (what vLLM, SGLang and llama.cpp accept) or, once a server refused those with
HTTP 400/422, as the text the tokenizer decodes them to (``prompt: auto``, the default; ``tokens`` or ``text``
fix the choice).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.generative import (
    GenerativePredictor,
    TokenRequest,
    TokenStream,
    generation_config,
)
from mlharness.predictors.openai_http import (
    RETRIABLE_STATUS,
    Endpoint,
    EndpointError,
    EndpointPool,
    chunk_tokens,
    http_library,
    sse_data,
)

log = logging.getLogger(__name__)

KNOWN_OPTIONS = frozenset({"endpoints", "model", "api_key_env", "deadline_s", "connect_timeout_s", "tokenizer",
                           "prompt", "max_concurrency", "generation", "server_token_ids", "extra_body"})
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def endpoint_manifest(loaded: Any, endpoints: list[str]) -> Any:
    """The run's manifest with its framework swapped for ``openai`` serving at ``endpoints`` (``--endpoint``).
    The manifest's model stays: its folder is where the tokenizer is read from when the server returns text
    only; the framework's own options that ``openai`` knows (``tokenizer``, ``generation``) carry over."""
    from dataclasses import replace

    m = loaded.model
    options = {k: v for k, v in m.framework.options.items() if k in KNOWN_OPTIONS}
    options["endpoints"] = list(endpoints)
    framework = m.framework.model_copy(update={"name": "openai", "version": "*", "options": options})
    return replace(loaded, model=m.model_copy(update={"framework": framework}))


class OpenAIPredictor(GenerativePredictor):
    name = "openai"

    def load(self) -> None:
        httpx = http_library()
        o = dict(self.config.options)
        unknown = set(o) - KNOWN_OPTIONS
        if unknown:
            raise PredictorError(f"unknown 'openai' framework option(s) {sorted(unknown)}; known: "
                                 f"{', '.join(sorted(KNOWN_OPTIONS))}")
        urls = o.get("endpoints") or []
        urls = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else list(urls)
        if not urls:
            raise PredictorError("framework 'openai' needs options.endpoints: a list of URLs (or --endpoint URL)")
        self.pool = EndpointPool([u for u in urls if u])
        self.endpoints = self.pool.endpoints
        self.deadline_s = float(o.get("deadline_s", 600.0))
        self.prompt_as = o.get("prompt", "auto")
        if self.prompt_as not in ("auto", "tokens", "text"):
            raise PredictorError(f"framework 'openai': options.prompt is '{self.prompt_as}'; use auto, tokens or "
                                 f"text")
        self.text_prompts = self.prompt_as == "text"
        self.server_ids = bool(o.get("server_token_ids", True))
        self.extra_body = dict(o.get("extra_body") or {})
        if o.get("generation"):  # framework options may override the manifest's generation section
            self.config.generation = generation_config(o["generation"])
        key_env = o.get("api_key_env", DEFAULT_KEY_ENV)
        key = os.environ.get(key_env)
        if "api_key_env" in o and not key:
            raise PredictorError(f"framework 'openai': options.api_key_env names ${key_env}, which is not set")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = httpx.Timeout(self.deadline_s, connect=float(o.get("connect_timeout_s", 10.0)))
        workers = int(o.get("max_concurrency", 256))
        self.client = httpx.Client(headers=headers, timeout=timeout,
                                   limits=httpx.Limits(max_connections=workers, max_keepalive_connections=workers))
        self.tokenizer_path = o.get("tokenizer") or getattr(self.config, "tokenizer", None) or self.config.model_path
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self.model = o.get("model") or self._served_model()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai")
        self._closing = False

    def _served_model(self) -> str:
        """The model the first endpoint serves (GET /v1/models); every endpoint must answer."""
        httpx = http_library()
        names: list[str] = []
        for ep in self.endpoints:
            try:
                r = self.client.get(f"{ep.base}/models")
                r.raise_for_status()
                names.extend(m["id"] for m in r.json().get("data", []))
            except (httpx.HTTPError, ValueError, KeyError) as e:
                raise PredictorError(f"framework 'openai': endpoint {ep.base} does not answer GET /models ({e}); "
                                     f"is the server running there?") from e
        if not names:
            raise PredictorError(f"framework 'openai': {self.endpoints[0].base} serves no model; set options.model")
        return names[0]

    @property
    def tokenizer(self) -> Any:
        with self._tokenizer_lock:
            if self._tokenizer is None:
                if not self.tokenizer_path:
                    raise PredictorError("framework 'openai': the server returned no token ids and no tokenizer is "
                                         "set (options.tokenizer: a local tokenizer folder) to tokenize its text")
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(str(self.tokenizer_path))
            return self._tokenizer

    def framework_version(self) -> str:
        httpx = http_library()
        return f"{httpx.__name__} {httpx.__version__}"

    def computes_off_host(self) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model,
                "endpoints": [{"url": e.base, "alive": e.alive, "requests": e.served} for e in self.endpoints]}

    # -- requests --------------------------------------------------------------------------------------------
    def submit(self, requests: list[TokenRequest], streams: list[TokenStream]) -> None:
        with self._lock:
            self._pending += len(requests)
        for request, stream in zip(requests, streams, strict=True):
            self._pool.submit(self._run, request, stream)

    def drain(self, timeout_s: float | None = None) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout=timeout_s)

    def close(self) -> None:
        """Fail what is still running or queued (each stream once), then stop."""
        self._closing = True
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=False)  # queued requests fail at once: _closing
        client = getattr(self, "client", None)
        if client is not None:
            client.close()

    def _run(self, request: TokenRequest, stream: TokenStream) -> None:
        try:
            if self._closing:
                raise PredictorError(f"sample {request.index}: the openai predictor was closed before it ran")
            ids = self._generate(request, stream)
        except BaseException as e:  # noqa: BLE001 - every request reports back exactly once
            self._finish(stream.fail, e)
        else:
            self._finish(stream.done, ids)

    def _finish(self, report: Any, value: Any) -> None:
        try:
            report(value)
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def _body(self, request: TokenRequest) -> dict[str, Any]:
        g = self.generation
        prompt: Any = [int(t) for t in np.asarray(request.prompt).reshape(-1)]
        if self.text_prompts:
            prompt = self.tokenizer.decode(prompt, skip_special_tokens=False)
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "stream": True,
                                "max_tokens": g.max_new_tokens, "temperature": g.temperature if g.do_sample else 0.0,
                                "top_p": g.top_p if g.do_sample else 1.0}
        if self.server_ids:  # vLLM (and servers that copy its extensions); others ignore unknown fields
            body.update({"min_tokens": g.min_new_tokens, "return_token_ids": True})
            if g.stop_token_ids:
                body["stop_token_ids"] = list(g.stop_token_ids)
            if g.do_sample and g.top_k:
                body["top_k"] = g.top_k
        body.update(self.extra_body)
        return body

    def _generate(self, request: TokenRequest, stream: TokenStream) -> np.ndarray:
        body = self._body(request)
        exclude: Endpoint | None = None
        last: EndpointError | None = None
        attempts = 0
        while attempts < 2:
            attempts += 1
            ep = self.pool.pick(exclude)
            if ep is None:
                break
            state = _Progress()
            try:
                ids = self._stream_one(ep, body, stream, state)
            except EndpointError as e:
                self.pool.release(ep, e)
                if self._to_text_prompts(e, body):  # the server refuses token-id prompts: send text from now on
                    body, attempts = self._body(request), attempts - 1
                    continue
                if not e.retriable or state.first_sent:
                    raise
                last, exclude = e, ep
                continue
            except BaseException:
                self.pool.release(ep, None)
                raise
            self.pool.release(ep, None)
            return ids
        dead = ", ".join(e.base for e in self.endpoints if not e.alive)
        raise EndpointError(f"no live endpoint left for sample {request.index} (failed: {dead or 'none'})"
                            + (f"; last error: {last}" if last else ""), retriable=False)

    def _to_text_prompts(self, e: EndpointError, body: dict[str, Any]) -> bool:
        """``prompt: auto``: a server that refuses a prompt of token ids (HTTP 400/422) is sent text instead
        (the request is sent again; a refused text prompt is the request's error)."""
        if self.prompt_as != "auto" or not isinstance(body["prompt"], list) or e.status not in (400, 422):
            return False
        if not self.tokenizer_path:
            return False
        with self._lock:
            if not self.text_prompts:
                log.warning("%s; sending prompts as text from now on", e)
                self.text_prompts = True
        return True

    def _stream_one(self, ep: Endpoint, body: dict[str, Any], stream: TokenStream, state: _Progress) -> np.ndarray:
        httpx = http_library()
        url = f"{ep.base}/completions"
        deadline = time.monotonic() + self.deadline_s
        try:
            with self.client.stream("POST", url, json=body) as r:
                if r.status_code != 200:
                    text = r.read().decode(errors="replace")[:500]
                    raise EndpointError(f"endpoint {url} answered HTTP {r.status_code}: {text}",
                                        retriable=r.status_code in RETRIABLE_STATUS, status=r.status_code)
                for data in sse_data(r.iter_lines()):
                    if data.strip() == "[DONE]":
                        break
                    self._take(json.loads(data), stream, state, url)
                    if self._closing:
                        raise EndpointError(f"endpoint {url}: the predictor was closed mid-stream", retriable=False)
                    if time.monotonic() > deadline:
                        raise EndpointError(f"endpoint {url}: request passed its deadline of {self.deadline_s} s",
                                            retriable=False)
        except httpx.TimeoutException as e:
            raise EndpointError(f"endpoint {url} timed out ({type(e).__name__})", retriable=True) from e
        except httpx.TransportError as e:
            raise EndpointError(f"endpoint {url} is unreachable ({type(e).__name__}: {e})", retriable=True) from e
        except json.JSONDecodeError as e:
            raise EndpointError(f"endpoint {url} streamed an event that is not JSON: {e}", retriable=False) from e
        return state.result(self)

    def _take(self, chunk: dict[str, Any], stream: TokenStream, state: _Progress, url: str) -> None:
        if "error" in chunk:
            raise EndpointError(f"endpoint {url} reported an error mid-stream: {chunk['error']}", retriable=False)
        for choice in chunk.get("choices") or []:
            ids = chunk_tokens(choice)
            text = choice.get("text") or ""
            if ids is not None:
                state.ids.extend(ids)
            else:
                state.text_only = True
                state.text += text
            if not state.first_sent:
                first = state.ids if ids is not None else (self.encode_text(text) if text else [])
                if first:
                    state.first, state.first_text = list(first), text
                    state.first_sent = True
                    stream.first(np.asarray(first, dtype=np.int32))

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))


class _Progress:
    """What one streamed request has produced so far."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.text = ""
        self.text_only = False
        self.first: list[int] = []
        self.first_text = ""
        self.first_sent = False

    def result(self, predictor: OpenAIPredictor) -> np.ndarray:
        if not self.text_only:
            return np.asarray(self.ids, dtype=np.int32)
        # text only: the first delta's tokens, then the rest of the text tokenized after them
        rest = self.text[len(self.first_text):]
        return np.asarray(self.first + (predictor.encode_text(rest) if rest else []), dtype=np.int32)
