"""One streamed completion as the ``openai`` predictor receives it, checked chunk by chunk: JSON objects only, token
ids that are whole numbers inside the vocabulary, never more tokens than the request's ``max_tokens``, and an end
the server said it reached (``data: [DONE]`` or a ``finish_reason``); a stream the connection cut is a failure,
never an answer. Chat completion chunks carry their text in ``delta.content``; the ``usage`` chunk
(``stream_options.include_usage``) gives ``completion_tokens`` and, where the server caches prefixes, the
``prompt_tokens_details.cached_tokens`` its prompt reused."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from mlharness.predictors.openai.http import EndpointError, chunk_tokens

MIN_TOKENS = 2  # LoadGen refuses a response of one token
try:  # several times faster than json on the small objects of a stream; same errors (ValueError)
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency
    _loads = json.loads


class StreamState:
    """What one try of a streamed request has produced so far, and the checks on it."""

    def __init__(self, url: str, index: int, max_tokens: Any, vocab: tuple[int, str] | None,
                 encode: Callable[[str], list[int]], text: bool = False):
        self.url, self.index, self.vocab, self.encode = url, index, vocab, encode
        # text: the answer is its text (generation.text): kept whatever the server sends beside it, and counted
        # by the server's usage where it reports it (the ids are then only counted, never read)
        self.keep_text = text
        # the request's max_tokens (extra_body may have set it to anything)
        self.max_tokens = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None
        self.ids: list[int] = []
        self.parts: list[str] = []  # the text's pieces (joined when read: += on an attribute copies each time)
        self.text_only = False
        self.text_chunks = 0  # chunks with text: each carries one token at least
        self.first: list[int] = []
        self.first_text = ""
        self.first_sent = False
        self.done = False  # data: [DONE]
        self.finish_reason: str | None = None
        self.usage_tokens: int | None = None  # usage.completion_tokens, where the server reported it
        self.cached_tokens = 0  # usage.prompt_tokens_details.cached_tokens: prompt tokens served from its cache

    def fail(self, what: str, retriable: bool = False) -> EndpointError:
        return EndpointError(f"endpoint {self.url}, sample {self.index} (qsl_idx): {what}", retriable=retriable)

    def take(self, data: bytes | str) -> tuple[bool, list[int] | None]:
        """One SSE event's data. Returns (tokens arrived, the first token ids when they are the sample's first)."""
        if data == b"[DONE]" or (len(data) < 32 and data.strip() in (b"[DONE]", "[DONE]")):
            self.done = True
            return False, None
        try:
            chunk = _loads(data)
        except ValueError as e:
            raise self.fail(f"an event that is not JSON ({e}: {_text(data)!r})") from e
        if not isinstance(chunk, dict):
            raise self.fail(f"an event that is not a completion chunk: {_text(data)!r}")
        if "error" in chunk:
            raise self.fail(f"the server reported an error mid-stream: {chunk['error']}")
        if chunk.get("usage"):
            self._usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if type(choices) is not list or (len(choices) != 1 or type(choices[0]) is not dict) and not all(
                type(c) is dict for c in choices):  # one choice, the common case, checked without a generator
            raise self.fail(f"a chunk whose choices are not a list of objects: {_text(data)!r}")
        moved, first = False, None
        for choice in choices:
            got, ids = self._choice(choice)
            moved = moved or got
            if not self.first_sent:
                if ids is not None:
                    new = list(self.ids)
                elif self.keep_text:  # a text answer's first token: only its time counts, not its id
                    new = [0] if any(self.parts) else []
                else:
                    new = self.encode(self.text) if any(self.parts) else []
                if new:
                    self.first, self.first_text, self.first_sent = list(new), self.text, True
                    first = list(new)
        return moved, first

    def _choice(self, choice: dict[str, Any]) -> tuple[bool, list[int] | None]:
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        ids = choice.get("token_ids")
        if ids is None and "logprobs" not in choice:  # text only (a chat delta): no ids to look for
            pass
        elif type(ids) is not list or not all(type(t) is int for t in ids):  # else: the common case, as they are
            try:
                ids = chunk_tokens(choice)
            except (ValueError, TypeError, AttributeError) as e:
                raise self.fail(f"token ids that are not whole numbers ({e})") from e
        text = choice.get("text")
        if text is None:  # a chat completion chunk: the text is the delta's content
            delta = choice.get("delta")
            text = delta.get("content") if type(delta) is dict else None
        text = text or ""
        if not isinstance(text, str):
            raise self.fail(f"a text that is not a string: {text!r}")
        if ids is not None:
            self._check_vocab(ids)
            self.ids.extend(ids)
            count, got = len(self.ids), bool(ids)
            if self.keep_text:
                self.parts.append(text)
        else:
            self.text_only = True
            self.parts.append(text)
            self.text_chunks += bool(text)
            count, got = self.text_chunks, bool(text)
        if self.max_tokens is not None and count > self.max_tokens:
            raise self.fail(f"more tokens ({count} so far) than the request's max_tokens {self.max_tokens}")
        return got, ids

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def _usage(self, usage: Any) -> None:
        if type(usage) is not dict:
            raise self.fail(f"a usage that is not an object: {usage!r}")
        n = usage.get("completion_tokens")
        if n is not None:
            if type(n) is not int or n < 0:
                raise self.fail(f"usage.completion_tokens {n!r} is not a whole number")
            self.usage_tokens = n
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if type(details) is dict else None
        if type(cached) is int and cached > 0:
            self.cached_tokens = cached

    def _check_vocab(self, ids: list[int]) -> None:
        size = self.vocab[0] if self.vocab else None
        if not ids or (min(ids) >= 0 and (size is None or max(ids) < size)):
            return
        bad = [t for t in ids if t < 0 or (size is not None and t >= size)]
        if bad:
            where = f"the vocabulary of {size} ids ({self.vocab[1]})" if self.vocab else "the vocabulary"
            raise self.fail(f"token id {bad[0]} is outside {where}")

    def result(self) -> np.ndarray:
        """Every new token id, once the stream ended as the server said it would (else the try failed)."""
        if not (self.done or self.finish_reason):
            n = len(self.ids) if not self.text_only else self.text_chunks
            raise self.fail(f"the stream ended after {n} token(s) without a finish_reason or data: [DONE] (the "
                            f"connection was closed mid-way)", retriable=True)
        if not self.text_only:
            ids = self.ids
        elif self.keep_text and self.usage_tokens is not None:  # counted by the server; the text is the answer
            ids = [0] * self.usage_tokens
        elif self.keep_text:
            ids = self.encode(self.text)
        else:  # the first delta's tokens, then the rest of the text tokenized after them
            rest = self.text[len(self.first_text):]
            ids = self.first + (self.encode(rest) if rest else [])
        if len(ids) < MIN_TOKENS:
            raise self.fail(f"an answer of {len(ids)} token(s) (finish_reason {self.finish_reason!r}); LoadGen "
                            f"needs at least {MIN_TOKENS} per response (does the server honour min_tokens? keep "
                            f"generation.min_new_tokens at 2 or more)")
        return np.asarray(ids, dtype=np.int32)


def _text(data: bytes | str) -> str:
    """The start of an event's data, for an error message."""
    return data[:200].decode("utf-8", errors="replace") if isinstance(data, bytes) else data[:200]
