"""Framework ``openai``: generation by any OpenAI-compatible HTTP server that streams (vLLM serve, SGLang, TGI,
llama.cpp server, hosted APIs).

Manifest use::

    framework:
      name: openai
      options: {endpoints: ["http://127.0.0.1:8000"], model: served-name, api_key_env: OPENAI_API_KEY,
                deadline_s: 600, tokenizer: /path/to/checkpoint, prompt: tokens}

or ``mlharness run --endpoint URL`` (repeatable) with a generative manifest (one whose input is ``type: audio``
goes to ``openai-audio`` instead: :func:`transcription_manifest`). Each sample is one streamed
``/v1/completions`` request (Server-Sent Events); a chat prompt (an input of ``type: chat``,
:mod:`mlharness.predictors.chat`) is one streamed ``/v1/chat/completions`` request whose messages were serialised
once per sample (:mod:`mlharness.predictors.openai.chat_body`). With ``generation.text`` the sample's response is
the streamed text as UTF-8 bytes, counted by the server's ``usage.completion_tokens`` where it reports them.
Prefix caching reported by the server is said and recorded, or refused (``require_no_prefix_cache``:
:mod:`mlharness.predictors.openai.prefix_cache`). Requests go to the endpoint with the fewest outstanding ones.
Before its first token, a request answered with HTTP 408, 429 or 5xx, or whose connection the server reset or
closed before answering (what a server's full listen backlog does under load), is sent again after a backoff
(``retries`` times, honouring ``Retry-After``), preferably to another endpoint; one whose endpoint is unreachable
(refused) or timed out is sent once more to another endpoint, as the gRPC agents' requests are. After the first
token nothing is sent again (the tokens would be duplicated): any failure fails that sample's stream. Each request
runs under separate deadlines (connect, response headers, first token, the gap between two token chunks, the
whole request: :mod:`mlharness.predictors.openai.watch`), and what it streams is checked (:mod:`mlharness.predictors.openai.stream`).

Token ids come from the server when it returns them (vLLM's ``return_token_ids``: each chunk's ``token_ids``;
or logprobs tokens of the form ``token_id:N``); otherwise the streamed text is tokenized with the manifest's
tokenizer (``tokenizer``: a local folder for ``transformers.AutoTokenizer``): the first text delta gives the
first token(s), and the rest of the text is tokenized after them, so the first tokens always prefix the answer.
The prompt is sent as token ids (what vLLM, SGLang and llama.cpp accept) or, once a server refused those with
HTTP 400/422, as the text the tokenizer decodes them to (``prompt: auto``, the default; ``tokens`` or ``text``
fix the choice).

All requests of a run share one asyncio event loop (uvloop's where installed) in a thread of its own and one
aiohttp connection pool (:mod:`mlharness.predictors.openai.async_runner`): up to ``max_concurrency`` requests at once
(default and ceiling :data:`~mlharness.predictors.openai.options.MAX_CONCURRENCY`, 16,384: an Offline run sends
every sample at once, a Server run every sample LoadGen has issued), the rest queued in order. The loop itself
calls each token stream's ``first`` and ``done``/``fail``, so the SUT hears from one thread however many streams
are open. Each body is read to its end, so connections are kept alive and reused
(:mod:`mlharness.predictors.openai.request`); the process's open-file limit is raised to what the concurrency
needs. With ``client_processes: N`` (N > 1) the requests are spread over N client processes instead, each with
such a loop (:mod:`mlharness.predictors.openai.procs`).
"""

from __future__ import annotations

import asyncio
import logging
import os
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
from mlharness.predictors.openai.async_runner import (
    LoopThread,
    Runner,
    loop_name,
    open_session,
    raise_fd_limit,
)
from mlharness.predictors.openai.chat_body import chat_body, is_chat, payload
from mlharness.predictors.openai.http import RETRIABLE_STATUS, Endpoint, EndpointError, EndpointPool
from mlharness.predictors.openai.options import KNOWN_OPTIONS, folder_vocab_size, parse_options
from mlharness.predictors.openai.prefix_cache import PrefixCacheWatch, metrics_prefix_caching
from mlharness.predictors.openai.request import encode, stream_one
from mlharness.predictors.openai.stream import StreamState
from mlharness.predictors.openai.watch import RequestClock

log = logging.getLogger(__name__)

__all__ = ["KNOWN_OPTIONS", "OpenAIPredictor", "endpoint_manifest"]
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
RULE_OPTIONS = ("require_no_prefix_cache",)  # carried from a manifest's openai variant to --endpoint runs
MODELS_NOTICE_S = 2.0  # GET /models at load: say what is awaited once it takes this long
CLOSE_WAIT_S = 5.0  # close(): how long the aborted requests may take to report back


def endpoint_manifest(loaded: Any, endpoints: list[str]) -> Any:
    """The run's manifest with its framework swapped for ``openai`` serving at ``endpoints`` (``--endpoint``).
    The manifest's model stays: its folder is where the tokenizer is read from when the server returns text
    only; the framework's own options that ``openai`` knows (``tokenizer``, ``generation``) carry over, and so do
    the rules its ``openai`` variant states (:data:`RULE_OPTIONS`; not its served model name, which the endpoint
    tells)."""
    m = loaded.model
    if any(spec.type == "audio" for spec in m.inputs):  # speech to text: /v1/audio/transcriptions
        return replace(loaded, model=transcription_manifest(m, endpoints))
    options = {k: v for k, v in m.framework.options.items() if k in KNOWN_OPTIONS}
    variant = m.frameworks.get("openai")  # the benchmark's rules its openai variant states hold for any endpoint
    options.update({k: v for k, v in (variant.framework.options if variant else {}).items() if k in RULE_OPTIONS})
    options["endpoints"] = list(endpoints)
    framework = m.framework.model_copy(update={"name": "openai", "version": "*", "options": options})
    return replace(loaded, model=m.model_copy(update={"framework": framework}))


def transcription_manifest(m: Any, endpoints: list[str]) -> Any:
    """A model whose input is audio, with its framework swapped for ``openai-audio`` at ``endpoints``: the options
    of its own ``openai-audio`` variant when it has one (the served model's name, the language), else those of its
    framework that ``openai-audio`` knows (``response``, ``tokenizer``)."""
    from mlharness.predictors.openai.audio import KNOWN_OPTIONS as AUDIO_OPTIONS

    variant = m.frameworks.get("openai-audio")
    if m.framework.name == "openai-audio":
        spec = m.framework
    elif variant is not None:
        spec = variant.framework
    else:
        spec = m.framework.model_copy(update={"options": {k: v for k, v in m.framework.options.items()
                                                          if k in AUDIO_OPTIONS}})
    options = {**spec.options, "endpoints": list(endpoints)}
    update: dict[str, Any] = {"framework": spec.model_copy(update={"name": "openai-audio", "version": "*",
                                                                   "options": options})}
    if variant is not None and m.framework.name != "openai-audio" and variant.model is not None:
        update["model"] = variant.model
    return m.model_copy(update=update)


class OpenAIPredictor(GenerativePredictor):
    name = "openai"

    def load(self) -> None:
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
            text = getattr(self.generation, "text", False)  # the manifest's response.text stays
            self.config.generation = generation_config(o["generation"])
            self.config.generation.text = text
        self.text_out = bool(getattr(self.generation, "text", False))  # the response is the answer's text
        self.prefix = PrefixCacheWatch(self.opts.no_prefix_cache)
        key_env = o.get("api_key_env", DEFAULT_KEY_ENV)
        key = os.environ.get(key_env)
        if "api_key_env" in o and not key:
            raise PredictorError(f"framework 'openai': options.api_key_env names ${key_env}, which is not set")
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        self.tokenizer_path = o.get("tokenizer") or getattr(self.config, "tokenizer", None) or self.config.model_path
        size = self.opts.vocab_size
        source = "options.vocab_size"
        if size is None:
            size, source = folder_vocab_size(self.tokenizer_path), f"the model folder {self.tokenizer_path}"
        self.vocab = (size, source) if size else None
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()
        self._lock = threading.Lock()
        self._closing = False
        if self.opts.client_processes > 1:  # the requests spread over client processes, each with its own loop
            from mlharness.predictors.openai.procs import ProcessClient

            self.runner = self.watch = ProcessClient(self.config, self.opts, self.prefix)
            self.concurrency, self.model = self.runner.limit, o.get("model") or self.runner.model
            return
        self.concurrency = raise_fd_limit(self.opts.workers, "options.max_concurrency" if self.opts.workers_given
                                          else None)
        self.loop = LoopThread("openai-loop")
        self.runner = Runner(self.loop, self._generate, self.concurrency)
        self.watch = self.runner  # the deadlines: kept by the loop's watchdogs wherever a request waits
        try:
            self.session = self.loop.call(open_session(headers, self.concurrency + len(self.endpoints),
                                                       self.opts.deadlines.connect), timeout=30)
            self.model = o.get("model") or self._served_model()
            for ep in self.endpoints:
                self.prefix.configured(ep.base, self.loop.call(metrics_prefix_caching(self.session, ep.base),
                                                               timeout=30))
        except BaseException:
            self.close()
            raise

    def _served_model(self) -> str:
        """The model the first endpoint serves (GET /v1/models); every endpoint must answer, within
        ``models_timeout_s`` each. A wait past :data:`MODELS_NOTICE_S` is said on the terminal."""
        limit = self.opts.models_timeout_s
        names: list[str] = []
        for ep in self.endpoints:
            notice = threading.Timer(MODELS_NOTICE_S, log.warning, args=(
                "waiting for %s to answer GET /models (the name of the model it serves); giving up after %g s "
                "(options.models_timeout_s; options.model skips this)", ep.base, limit))
            notice.daemon = True
            notice.start()
            try:
                names.extend(self.loop.call(self._models(ep, limit), timeout=limit + 5))
            except PredictorError:
                raise
            except Exception as e:  # noqa: BLE001 - whatever failed, the endpoint did not answer as it should
                why = (f"no answer within {limit:g} s, options.models_timeout_s"
                       if isinstance(e, (asyncio.TimeoutError, TimeoutError)) else f"{type(e).__name__}: {e}")
                raise PredictorError(f"framework 'openai': endpoint {ep.base} does not answer GET /models ({why}); "
                                     f"is the server running there?") from e
            finally:
                notice.cancel()
        if not names:
            raise PredictorError(f"framework 'openai': {self.endpoints[0].base} serves no model; set options.model")
        return str(names[0])

    async def _models(self, ep: Endpoint, limit: float) -> list[str]:
        async def get() -> list[str]:
            async with self.session.get(f"{ep.base}/models") as r:
                r.raise_for_status()
                return [str(m["id"]) for m in (await r.json(content_type=None)).get("data", [])]

        return await asyncio.wait_for(get(), limit)

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
        import aiohttp

        return f"aiohttp {aiohttp.__version__} ({loop_name()})"

    def computes_off_host(self) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model, "max_concurrency": self.concurrency,
                "peak_in_flight": self.runner.peak,
                "endpoints": [{"url": e.base, "alive": e.alive, "requests": e.served} for e in self.endpoints],
                "prefix_cache": self.prefix.describe(),
                **(self.runner.describe() if self.opts.client_processes > 1 else {})}

    # -- the requests: tasks of the event loop (mlharness.predictors.openai.async_runner) --------------------------------
    def submit(self, requests: list[TokenRequest], streams: list[TokenStream]) -> None:
        if self._closing:  # the loop is stopping
            for request, stream in zip(requests, streams, strict=True):
                stream.fail(PredictorError(f"sample {request.index}: the openai predictor is closed"))
            return
        self.runner.submit(list(zip(requests, streams, strict=True)))

    def prepare(self, prompt: Any) -> None:
        if is_chat(prompt):
            payload(prompt)  # the messages' JSON, data URLs included, built at load time and kept with the prompt

    def drain(self, timeout_s: float | None = None) -> bool:
        return self.runner.drain(timeout_s)

    def close(self) -> None:
        """Fail what is still running or queued (each stream once), then stop: the requests in flight are
        cancelled (their connections closed), so this returns within seconds whatever the servers do."""
        self._closing = True
        runner = getattr(self, "runner", None)
        if runner is None:  # load() failed before anything ran
            return
        stuck = runner.close(CLOSE_WAIT_S)
        if stuck:
            log.warning("%d openai request(s) did not stop within %g s of closing; left behind", stuck, CLOSE_WAIT_S)
        session = getattr(self, "session", None)
        if session is not None and not stuck:
            try:
                self.loop.call(session.close(), timeout=CLOSE_WAIT_S)
            except Exception as e:  # noqa: BLE001 - closing sockets of a finished run: nothing to report to
                log.debug("closing the openai connection pool: %s", e)
        if self.opts.client_processes == 1:
            self.loop.stop(CLOSE_WAIT_S)

    def chat_engine(self) -> Any:
        """A session engine at the first endpoint: :func:`mlharness.kinds.sessions.openai_engine.for_predictor`."""
        from mlharness.kinds.sessions.openai_engine import for_predictor
        return for_predictor(self)

    # -- one request ---------------------------------------------------------------------------------------------
    def _body(self, request: TokenRequest) -> dict[str, Any]:
        g = self.generation
        body: dict[str, Any] = {"model": self.model, "stream": True,
                                "max_tokens": g.max_new_tokens, "temperature": g.temperature if g.do_sample else 0.0,
                                "top_p": g.top_p if g.do_sample else 1.0}
        if is_chat(request.prompt):  # the messages are spliced in by chat_body; usage counts the answer's tokens
            body["stream_options"] = {"include_usage": True}
        else:
            prompt: Any = [int(t) for t in np.asarray(request.prompt).reshape(-1)]
            body["prompt"] = self.tokenizer.decode(prompt, skip_special_tokens=False) if self.text_prompts else prompt
        if self.server_ids:  # vLLM (and servers that copy its extensions); others ignore unknown fields
            body.update({"min_tokens": g.min_new_tokens, "return_token_ids": True})
            if g.stop_token_ids:
                body["stop_token_ids"] = list(g.stop_token_ids)
            if g.do_sample and g.top_k:
                body["top_k"] = g.top_k
        body.update(self.extra_body)
        return body

    async def _generate(self, request: TokenRequest, stream: TokenStream) -> np.ndarray:
        body = self._body(request)
        chat = payload(request.prompt) if is_chat(request.prompt) else None
        data = chat_body(chat, body) if chat is not None else encode(body)
        path = "chat/completions" if chat is not None else "completions"
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
            state = StreamState(f"{ep.base}/{path}", request.index, body.get("max_tokens"), self.vocab,
                                self.encode_text, self.text_out)
            try:
                ids = await stream_one(self.session, data, stream, state, clock, self._is_closing)
            except EndpointError as e:
                self.pool.release(ep)
                if self._closing or state.first_sent:
                    raise  # after the first token a retry would stream the tokens twice
                if self._to_text_prompts(e, body):  # the server refuses token-id prompts: send text from now on
                    body = self._body(request)
                    data = encode(body)
                    continue
                if e.status in RETRIABLE_STATUS or e.reset:  # busy (a reset: its listen backlog overflowed)
                    tries += 1
                    await self._backoff(ep, e, tries, clock, request.index)
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
            if state.cached_tokens:
                self.prefix.answered(state.cached_tokens, request.index, state.url)
            if self.text_out:  # (ids, response): the ids only counted, the text is what the sample answers
                return ids, np.frombuffer(state.text.encode("utf-8"), dtype=np.uint8)
            return ids

    async def _backoff(self, ep: Endpoint, e: EndpointError, tries: int, clock: RequestClock, index: int) -> None:
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
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            raise EndpointError(f"sample {index}: the openai predictor was closed while it waited to retry",
                                retriable=False) from None

    def _is_closing(self) -> bool:
        return self._closing

    def _to_text_prompts(self, e: EndpointError, body: dict[str, Any]) -> bool:
        """``prompt: auto``: a server that refuses a prompt of token ids (HTTP 400/422) is sent text instead
        (the request is sent again; a refused text prompt is the request's error)."""
        if self.prompt_as != "auto" or not isinstance(body.get("prompt"), list) or e.status not in (400, 422):
            return False
        if not self.tokenizer_path:
            return False
        with self._lock:
            if not self.text_prompts:
                log.warning("%s; sending prompts as text from now on", e)
                self.text_prompts = True
        return True

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

