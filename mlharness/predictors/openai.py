"""Framework ``openai``: generation by any OpenAI-compatible HTTP server that streams (vLLM serve, SGLang, TGI,
llama.cpp server, hosted APIs).

Manifest use::

    framework:
      name: openai
      options: {endpoints: ["http://127.0.0.1:8000"], model: served-name, api_key_env: OPENAI_API_KEY,
                deadline_s: 600, tokenizer: /path/to/checkpoint, prompt: tokens}

or ``mlharness run --endpoint URL`` (repeatable) with a generative manifest. Each sample is one streamed
``/v1/completions`` request (Server-Sent Events). Requests go to the endpoint with the fewest outstanding ones.
Before its first token, a request answered with HTTP 408, 429 or 5xx is sent again after a backoff (``retries``
times, honouring ``Retry-After``), preferably to another endpoint; one whose endpoint is unreachable or timed out
is sent once more to another endpoint, as the gRPC agents' requests are. After the first token nothing is sent
again (the tokens would be duplicated): any failure fails that sample's stream. Each request runs under separate
deadlines (connect, response headers, first token, the gap between two token chunks, the whole request:
:mod:`mlharness.predictors.openai_watch`), and what it streams is checked (:mod:`mlharness.predictors.openai_stream`).

Token ids come from the server when it returns them (vLLM's ``return_token_ids``: each chunk's ``token_ids``;
or logprobs tokens of the form ``token_id:N``); otherwise the streamed text is tokenized with the manifest's
tokenizer (``tokenizer``: a local folder for ``transformers.AutoTokenizer``): the first text delta gives the
first token(s), and the rest of the text is tokenized after them, so the first tokens always prefix the answer.
The prompt is sent as token ids (what vLLM, SGLang and llama.cpp accept) or, once a server refused those with
HTTP 400/422, as the text the tokenizer decodes them to (``prompt: auto``, the default; ``tokens`` or ``text``
fix the choice).
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from dataclasses import replace
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
    LineTooLong,
    bounded_lines,
    http_library,
    refused,
    sse_data,
)
from mlharness.predictors.openai_options import KNOWN_OPTIONS, folder_vocab_size, parse_options
from mlharness.predictors.openai_stream import StreamState
from mlharness.predictors.openai_watch import RequestClock, watched_client, watching

log = logging.getLogger(__name__)

__all__ = ["KNOWN_OPTIONS", "OpenAIPredictor", "endpoint_manifest"]
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
MODELS_NOTICE_S = 2.0  # GET /models at load: say what is awaited once it takes this long
CLOSE_WAIT_S = 5.0  # close(): how long the aborted requests may take to report back
_STOP = object()


def endpoint_manifest(loaded: Any, endpoints: list[str]) -> Any:
    """The run's manifest with its framework swapped for ``openai`` serving at ``endpoints`` (``--endpoint``).
    The manifest's model stays: its folder is where the tokenizer is read from when the server returns text
    only; the framework's own options that ``openai`` knows (``tokenizer``, ``generation``) carry over."""
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
        self.opts = parse_options(o, self.config.manifest_path)
        self.pool = EndpointPool(self.opts.urls)
        self.endpoints = self.pool.endpoints
        self.deadline_s = self.opts.deadlines.total
        self.prompt_as = self.opts.prompt
        self.text_prompts = self.prompt_as == "text"
        self.server_ids = self.opts.server_ids
        self.extra_body = self.opts.extra_body
        if o.get("generation"):  # framework options may override the manifest's generation section
            self.config.generation = generation_config(o["generation"])
        key_env = o.get("api_key_env", DEFAULT_KEY_ENV)
        key = os.environ.get(key_env)
        if "api_key_env" in o and not key:
            raise PredictorError(f"framework 'openai': options.api_key_env names ${key_env}, which is not set")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.tokenizer_path = o.get("tokenizer") or getattr(self.config, "tokenizer", None) or self.config.model_path
        size = self.opts.vocab_size
        source = "options.vocab_size"
        if size is None:
            size, source = folder_vocab_size(self.tokenizer_path), f"the model folder {self.tokenizer_path}"
        self.vocab = (size, source) if size else None
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._pending = 0  # submitted, not yet reported back
        self._queued = 0  # submitted, not yet taken by a worker
        self._idle_workers = 0
        self._threads: list[threading.Thread] = []
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closing = False
        self._closed = threading.Event()  # wakes a backoff wait
        self.client, self.watch = watched_client(httpx, self.opts.deadlines, self.opts.workers, headers)
        try:
            self.model = o.get("model") or self._served_model()
        except BaseException:
            self.client.close()
            raise

    def _served_model(self) -> str:
        """The model the first endpoint serves (GET /v1/models); every endpoint must answer, within
        ``models_timeout_s`` each. A wait past :data:`MODELS_NOTICE_S` is said on the terminal."""
        httpx = http_library()
        limit = self.opts.models_timeout_s
        limits = replace(self.opts.deadlines, first_byte=limit, total=limit)
        names: list[str] = []
        for ep in self.endpoints:
            notice = threading.Timer(MODELS_NOTICE_S, log.warning, args=(
                "waiting for %s to answer GET /models (the name of the model it serves); giving up after %g s "
                "(options.models_timeout_s; options.model skips this)", ep.base, limit))
            notice.daemon = True
            notice.start()
            clock = RequestClock(limits)
            try:
                with watching(clock):
                    r = self.client.get(f"{ep.base}/models", timeout=httpx.Timeout(limit, connect=limits.connect))
                    r.raise_for_status()
                    names.extend(m["id"] for m in r.json().get("data", []))
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as e:
                why = f"no answer within {limit:g} s, options.models_timeout_s" if clock.expired() else str(e)
                raise PredictorError(f"framework 'openai': endpoint {ep.base} does not answer GET /models ({why}); "
                                     f"is the server running there?") from e
            finally:
                notice.cancel()
        if not names:
            raise PredictorError(f"framework 'openai': {self.endpoints[0].base} serves no model; set options.model")
        return str(names[0])

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

    # -- the workers: one request each at a time, daemon threads so that none can hold the process's exit -------
    def submit(self, requests: list[TokenRequest], streams: list[TokenStream]) -> None:
        if self._closing:  # no worker is left to take them
            for request, stream in zip(requests, streams, strict=True):
                stream.fail(PredictorError(f"sample {request.index}: the openai predictor is closed"))
            return
        with self._lock:
            self._pending += len(requests)
            self._queued += len(requests)
            for job in zip(requests, streams, strict=True):
                self._jobs.put(job)
            start = min(self._queued - self._idle_workers, self.opts.workers - len(self._threads))
            for _ in range(max(0, start)):
                t = threading.Thread(target=self._work, name=f"openai-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle_workers += 1
            job = self._jobs.get()
            with self._lock:
                self._idle_workers -= 1
                if job is not _STOP:
                    self._queued -= 1
            if job is _STOP:
                return
            self._run(*job)

    def drain(self, timeout_s: float | None = None) -> bool:
        with self._settled:
            return self._settled.wait_for(lambda: self._pending == 0, timeout=timeout_s)

    def close(self) -> None:
        """Fail what is still running or queued (each stream once), then stop: requests in flight are aborted
        (their sockets shut down), so this returns within seconds whatever the servers do."""
        self._closing = True
        closed = getattr(self, "_closed", None)
        if closed is None:  # load() failed before anything ran
            return
        closed.set()
        self.watch.abort_all()
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(_STOP)  # after the queued jobs, which fail at once: _closing
        end = time.monotonic() + CLOSE_WAIT_S
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        stuck = sum(t.is_alive() for t in threads)
        if stuck:
            log.warning("%d openai request(s) did not stop within %g s of closing; left behind", stuck, CLOSE_WAIT_S)
        self.client.close()

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
            with self._settled:
                self._pending -= 1
                self._settled.notify_all()

    # -- one request ---------------------------------------------------------------------------------------------
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
        clock = RequestClock(self.opts.deadlines)  # the whole request, retries included
        exclude: Endpoint | None = None
        last: EndpointError | None = None
        moves = tries = 0
        while True:
            ep = self.pool.pick(exclude) or (self.pool.pick(None) if exclude is not None and exclude.alive else None)
            if ep is None:
                dead = ", ".join(e.base for e in self.endpoints if not e.alive)
                if last is not None:
                    raise EndpointError(f"{last}; no other live endpoint to send it to (failed: {dead})",
                                        retriable=False)
                raise EndpointError(f"no live endpoint left for sample {request.index} (failed: {dead or 'none'})",
                                    retriable=False)
            state = StreamState(f"{ep.base}/completions", request.index, body.get("max_tokens"), self.vocab,
                                self.encode_text)
            try:
                ids = self._stream_one(body, stream, state, clock)
            except EndpointError as e:
                self.pool.release(ep)
                if self._closing or state.first_sent:
                    raise  # after the first token a retry would stream the tokens twice
                if self._to_text_prompts(e, body):  # the server refuses token-id prompts: send text from now on
                    body = self._body(request)
                    continue
                if e.status in RETRIABLE_STATUS:
                    tries += 1
                    self._backoff(ep, e, tries, clock, request.index)
                elif e.retriable:  # unreachable, cut off or timed out before the first token: that endpoint is gone
                    self.pool.give_up(ep, e)
                    moves += 1
                    if moves >= 2 or time.monotonic() >= clock.end:
                        raise
                else:
                    raise
                exclude, last = ep, e
                continue
            except BaseException:
                self.pool.release(ep)
                raise
            self.pool.release(ep)
            return ids

    def _backoff(self, ep: Endpoint, e: EndpointError, tries: int, clock: RequestClock, index: int) -> None:
        """Wait before sending a request again that got HTTP 408/429/5xx (``Retry-After`` when the server gave
        one), or give up: after ``retries`` tries, or when the wait would pass the request's deadline."""
        o = self.opts
        if tries > o.retries:
            self.pool.give_up(ep, e)
            raise EndpointError(f"{e}; still failing after {tries} tries (options.retries = {o.retries})",
                                retriable=False, status=e.status)
        if e.retry_after is not None:
            wait = min(o.retry_max_wait_s, e.retry_after)
        else:
            jitter = random.uniform(0.8, 1.2)  # noqa: S311 - spreads the retries of requests refused together
            wait = min(o.retry_max_wait_s, o.retry_backoff_s * 2 ** (tries - 1) * jitter)
        if time.monotonic() + wait >= clock.end:
            raise EndpointError(f"{e}; a retry in {wait:g} s would pass the request's deadline (deadline_s = "
                                f"{o.deadlines.total:g} s)", retriable=False, status=e.status)
        log.info("%s; sample %d is sent again in %.2f s (try %d of %d)", e, index, wait, tries + 1, o.retries + 1)
        if self._closed.wait(wait):
            raise EndpointError(f"sample {index}: the openai predictor was closed while it waited to retry",
                                retriable=False)

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

    def _stream_one(self, body: dict[str, Any], stream: TokenStream, state: StreamState,
                    clock: RequestClock) -> np.ndarray:
        httpx = http_library()
        url = state.url
        clock.send()
        try:
            with watching(clock), self.client.stream("POST", url, json=body) as r:
                clock.headers()
                if r.status_code != 200:
                    raise refused(r, url, state.index)
                for data in sse_data(self._lines(r, clock, state)):
                    moved, first = state.take(data)
                    if moved:
                        clock.token()
                    if first:
                        stream.first(np.asarray(first, dtype=np.int32))
                    if state.done:
                        break
        except httpx.TimeoutException as e:
            raise self._cut(state, clock, e, timed_out=True) from e
        except httpx.TransportError as e:
            raise self._cut(state, clock, e, timed_out=False) from e
        except LineTooLong as e:
            raise state.fail(f"a stream with {e}") from e
        return state.result()

    def _lines(self, r: Any, clock: RequestClock, state: StreamState) -> Any:
        """The response's lines, each checked against the deadlines (keep-alive comments included: they do not
        move the clock on) and against close()."""
        for line in bounded_lines(r.iter_bytes()):
            if self._closing:
                raise state.fail("the openai predictor was closed mid-stream")
            if clock.expired():
                raise state.fail(f"timed out: {clock.overdue()}", retriable=True)
            yield line

    def _cut(self, state: StreamState, clock: RequestClock, e: Exception, timed_out: bool) -> EndpointError:
        if self._closing:
            return state.fail("the openai predictor was closed mid-stream")
        if timed_out or clock.expired():
            what = clock.overdue() if clock.expired() else f"{type(e).__name__}: {e}"
            return state.fail(f"timed out: {what}", retriable=True)
        return state.fail(f"unreachable, or the connection was cut ({type(e).__name__}: {e})", retriable=True)

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

