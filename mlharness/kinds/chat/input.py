"""What a ``type: chat`` input is: each sample a list of chat messages (text and images), checked at load time by
:func:`~mlharness.predictors.chat.parse_chat` and kept as the :class:`~mlharness.predictors.chat.ChatPrompt`
itself; the token SUT (``kinds/tokens/sut.py``) builds what the predictors send for it as it is loaded."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.kinds.chat import BadChatInput
from mlharness.loadgen.qsl import InputKind
from mlharness.predictors.chat import CHAT_INPUT, ChatLimits, parse_chat

__all__ = ["CHAT_INPUT", "BadChatInput", "chat_sample", "make_input"]


def chat_sample(out: Any, index: int, spec: dict[str, Any], manifest: str) -> np.ndarray:
    """``preprocess``'s messages for sample ``index`` checked (:func:`~mlharness.predictors.chat.parse_chat`) and
    kept as a 0-d object array: the store stacks and gathers it like any input, and a request's prompt is the
    :class:`~mlharness.predictors.chat.ChatPrompt` itself."""
    try:
        prompt = parse_chat(out, index, ChatLimits.from_spec(spec.get("parameters")))
    except DatasetError as e:  # exit status 2, the sample, message and part named, and the hook that made them
        raise BadChatInput("preprocess", manifest, e.message) from None
    cell = np.empty((), dtype=object)
    cell[()] = prompt
    return cell


def make_input(ctx: dict[str, Any], manifest: str) -> InputKind:
    spec = ctx["inputs"][0]
    return InputKind(sample=lambda out, index: chat_sample(out, index, spec, manifest))
