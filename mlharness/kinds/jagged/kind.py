"""The jagged kind's row: an input alone (``inputs[0].type: jagged``, ``input.py``); a model answers it as another kind
says."""

from __future__ import annotations

from mlharness.kinds.base import Kind
from mlharness.kinds.jagged.input import make_input

KIND = Kind("jagged", make_input=make_input)
