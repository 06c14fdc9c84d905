"""What a session is: an ordered list of turns, each adding messages to the conversation's history.

Messages are OpenAI chat messages (dicts with ``role`` and ``content``; an assistant message may carry
``tool_calls``, a ``tool`` message a ``tool_call_id``), the form every engine receives. A turn's ``messages`` are
what the client adds before it sends the turn: a user message, or the results of the tools the previous answer
called (``role: tool``). ``recorded`` is the assistant message the trace recorded as the answer to the turn, where
the trace has one: the ground truth of an inline check, and the history of a replay whose ``history`` is
``"recorded"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text the model wrote (not parsed: a malformed argument string is the model's answer)

    def message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def parsed(self) -> Any:
        """The arguments as JSON, or None where they are not valid JSON."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return None


@dataclass(frozen=True)
class Turn:
    messages: tuple[dict[str, Any], ...]  # what the client adds to the history before sending the turn
    think_s: float = 0.0  # seconds between the previous answer's end (or the session's start) and this turn's send
    tools: tuple[dict[str, Any], ...] | None = None  # OpenAI ``tools`` of this turn; None: the session's
    recorded: dict[str, Any] | None = None  # the assistant message recorded as this turn's answer
    max_tokens: int | None = None  # per-turn cap; None: the run's generation.max_new_tokens


@dataclass(frozen=True)
class Session:
    id: str
    turns: tuple[Turn, ...]
    system: str | None = None  # the system prompt, first in every turn's history
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI ``tools`` offered on every turn that names none
    start_s: float = 0.0  # the session's start, seconds after the trace's first session (timing as recorded)
    meta: dict[str, Any] = field(default_factory=dict, compare=False)  # format-specific extras (hash ids, source)

    def tools_for(self, turn: Turn) -> tuple[dict[str, Any], ...]:
        return self.tools if turn.tools is None else turn.tools


@dataclass(frozen=True)
class Answer:
    """One engine's answer to one turn."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    prompt_tokens: int | None = None  # as the engine counted them (usage), None where it did not say
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, None where not reported
    finish_reason: str | None = None

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the history."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [c.message() for c in self.tool_calls]
        return msg

    def as_json(self) -> dict[str, Any]:
        """What the accuracy log stores of the answer (``content`` and ``tool_calls`` with their argument text)."""
        return {"content": self.content,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]}
