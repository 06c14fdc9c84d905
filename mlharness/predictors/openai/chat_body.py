"""Chat prompts (:class:`~mlharness.predictors.chat.ChatPrompt`) as the body of a streamed ``/v1/chat/completions``
request of the ``openai`` predictor.

The messages, with every image a base64 data URL of the dataset's own bytes, are the bulk of a chat request: they
are serialised to JSON once per sample (:func:`payload`, cached for as long as the prompt lives) and each request's
body is those bytes spliced beside the few fields of the request (:func:`chat_body`), so nothing is encoded per
request but a few numbers. What crosses to the client processes (``client_processes``) is the same
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
    and the like, from the prompt's extra)."""

    __slots__ = ("index", "messages", "fields")

    def __init__(self, index: int, messages: bytes, fields: dict[str, Any]):
        self.index, self.messages, self.fields = index, messages, fields

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
    rest = encode({**fields, **p.fields})  # b"{...}", never empty: the model and stream are always there
    return b'{"messages":' + p.messages + b"," + rest[1:]
