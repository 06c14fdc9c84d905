"""Chat prompts (:class:`~mlharness.predictors.chat.ChatPrompt`) as the body of a streamed ``/v1/chat/completions``
request of the ``openai`` predictor.

The messages, with every image a base64 data URL of the dataset's own bytes, are the bulk of a chat request: they
are serialised to JSON once per sample (:func:`payload`, cached for as long as the prompt lives) and spliced
beside the few fields of the request (:func:`chat_body`) once: the fields are the run's (model, generation
settings), the same for every request, so a sample sent again reuses its whole body, and nothing is encoded or
copied per request but those few fields (a body of megabytes of images would otherwise be copied each time). What crosses to the client processes (``client_processes``) is the same
:class:`ChatPayload`: bytes and the prompt's extra fields, never decoded images.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from mlharness.predictors.chat import ChatPrompt
from mlharness.predictors.openai.request import encode

# request fields a dataset's prompt may set beside the messages (the rest of ChatPrompt.extra is the dataset's own)
PASSED_FIELDS = ("response_format", "chat_template_kwargs")

_cache: weakref.WeakKeyDictionary[ChatPrompt, ChatPayload] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class ChatPayload:
    """One sample's chat request parts: ``messages`` (the JSON array, bytes) and ``fields`` (``response_format``
    and the like, from the prompt's extra). Once a body is built it holds the messages (no second copy)."""

    __slots__ = ("index", "fields", "_data", "_rest", "_size")
    HEAD = b'{"messages":'

    def __init__(self, index: int, messages: bytes, fields: dict[str, Any]):
        self.index, self.fields = index, fields
        self._data, self._rest, self._size = messages, None, len(messages)  # the messages, until a body is built

    @property
    def messages(self) -> bytes:
        if self._rest is None:
            return self._data
        return self._data[len(self.HEAD):len(self.HEAD) + self._size]

    def body(self, rest: bytes) -> bytes:
        """The request's JSON for the other fields ``rest`` (``b"{...}"``), built again only when they change."""
        if rest != self._rest:
            self._data, self._rest = self.HEAD + self.messages + b"," + rest[1:], rest
        return self._data

    def __reduce__(self) -> Any:  # slots and no __dict__: pickled by its three parts
        return ChatPayload, (self.index, self.messages, self.fields)


def is_chat(prompt: Any) -> bool:
    return isinstance(prompt, (ChatPrompt, ChatPayload))


def payload(prompt: ChatPrompt | ChatPayload) -> ChatPayload:
    """The prompt's request parts, built on first use and kept with the prompt."""
    if isinstance(prompt, ChatPayload):
        return prompt
    with _lock:
        found = _cache.get(prompt)
    if found is not None:
        return found
    fields = {k: prompt.extra[k] for k in PASSED_FIELDS if k in prompt.extra}
    made = ChatPayload(prompt.index, encode(prompt.openai_messages), fields)
    with _lock:
        return _cache.setdefault(prompt, made)


def chat_body(p: ChatPayload, fields: dict[str, Any]) -> bytes:
    """The request's JSON: the cached messages spliced in front of ``fields`` and the prompt's own fields."""
    return p.body(encode({**fields, **p.fields}))  # b"{...}", never empty: the model and stream are always there
