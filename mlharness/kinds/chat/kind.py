"""The chat kind's row: an input alone (``inputs[0].type: chat``, ``input.py``); a model answers it as another kind
says."""

from __future__ import annotations

from mlharness.kinds.base import Kind
from mlharness.kinds.chat.input import make_input

KIND = Kind("chat", make_input=make_input)
