"""What answers a turn: the interface every session engine implements.

An engine receives the whole history of the turn (system prompt, earlier turns and answers, the turn's own
messages), the tools offered, and per-request extras (headers such as the session-affinity one, a per-turn token
cap), and answers with an :class:`~mlharness.kinds.sessions.model.Answer`, calling ``timing.first()`` when the first
token (or tool-call fragment) of the answer exists. Engines: an OpenAI-compatible endpoint (``openai_engine``), an
in-process transformers model (``mlharness/predictors/transformers_chat.py``), the oracle of a task (its table of
answers). A predictor that can play sessions has a ``chat_engine()`` method returning one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mlharness.kinds.sessions.model import Answer


@dataclass
class TurnRequest:
    session_id: str
    turn: int  # 0-based index of the turn in its session
    messages: list[dict[str, Any]]  # the whole history to send, system prompt first
    tools: list[dict[str, Any]]  # OpenAI tools ([] for none)
    max_tokens: int
    headers: dict[str, str] = field(default_factory=dict)  # extra HTTP headers (session affinity)
    extra_body: dict[str, Any] = field(default_factory=dict)  # request fields of the run (temperature, seed...)


class Timing(Protocol):
    def first(self) -> None:
        """The answer's first token or tool-call fragment arrived (idempotent: later calls are ignored)."""


class ChatEngine(Protocol):
    name: str

    async def answer(self, request: TurnRequest, timing: Timing) -> Answer:
        """Answer one turn. Raises :class:`mlharness.errors.PredictorError` (or a subclass) naming the session and
        turn when the engine fails; the player records the failure and ends the session with an error."""
        ...

    async def aclose(self) -> None:
        """Release connections and workers (called once, after the last session)."""
        ...
