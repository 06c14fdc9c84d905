"""The graph kind's row: an input alone (``inputs[0].type: graph``, ``input.py``); a model answers it as another kind
says."""

from __future__ import annotations

from mlharness.kinds.base import Kind
from mlharness.kinds.graph.input import make_input

KIND = Kind("graph", make_input=make_input)
