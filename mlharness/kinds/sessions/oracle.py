"""``session-oracle``: a test predictor whose chat engine answers each turn of a session from a table, keyed by the
conversation itself.

Its model file is a JSON table (written by a task's ``model.generator``, e.g.
``mlharness.tasks.qwen36.models:ensure_oracle_table``): ``{"format": 1, "turns": {key: assistant message}}``, the
key being :func:`conversation_key` of the whole history a turn is sent with and the tools it offers. A BFCL prompt
is answered with its ground truth, a recorded agentic turn with the assistant message the trace recorded, so a task's
score is exactly its maximum when the whole path is right (the sessions built at load time, each turn's history as
the player sends it, the answers logged and scored), and any mistake on the way (a message lost or reordered, the
tools not sent, a turn's history built from the wrong answers) is a conversation the table does not know: the turn
fails with an error naming the session, the turn and what its last message said.

The key is over content, not position: roles, texts (a list of text parts joined), the names and arguments of tool
calls (arguments as canonical JSON where they parse), and the tools; not the tool-call ids (the player re-keys tool
results to the answer's ids), and not the cache-bust salt the player puts before the first message. Nothing is
streamed: ``timing.first()`` is called as the answer is looked up (after ``first_token_delay_ms``), and the answer
returned after ``answer_delay_ms`` more (framework options, default 0; a run with a latency to measure).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.fileguard import read_json
from mlharness.kinds.sessions.engine import Timing, TurnRequest
from mlharness.kinds.sessions.model import Answer, Session, ToolCall
from mlharness.predictors.base import Predictor

TABLE_FORMAT = 1
_SALT = re.compile(r"^\[salt: [0-9a-f]+\]\n\n")  # mlharness.kinds.sessions.replay.salted's prefix


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return json.dumps(content, sort_keys=True, ensure_ascii=False)


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments  # as written: malformed arguments are part of the conversation
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _call(call: dict[str, Any]) -> list[str]:
    fn = call.get("function") if isinstance(call.get("function"), dict) else call
    return [str(fn.get("name", "")), _arguments(fn.get("arguments", {}))]


def conversation_key(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | tuple[dict[str, Any], ...]
                     ) -> str:
    """sha256 of a turn's conversation as the table keys it: each message's role, text and tool calls (name,
    arguments), then the tools; tool-call ids and the first message's cache-bust salt left out."""
    rows = []
    for k, m in enumerate(messages):
        text = _text(m.get("content"))
        if k == 0:
            text = _SALT.sub("", text, count=1)
        rows.append([str(m.get("role")), text, [_call(c) for c in m.get("tool_calls") or []]])
    payload = json.dumps({"messages": rows, "tools": list(tools)}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def recorded_turns(session: Session) -> list[tuple[str, dict[str, Any]]]:
    """(key, recorded answer) of every turn of ``session`` that has a recorded answer, each turn's history being
    the one the player sends when the engine answers every earlier turn as recorded: the system prompt, each earlier
    turn's messages followed by its recorded answer, then the turn's own messages."""
    history: list[dict[str, Any]] = []
    if session.system is not None:
        history.append({"role": "system", "content": session.system})
    out = []
    for turn in session.turns:
        history.extend(turn.messages)
        if turn.recorded is None:
            break  # later turns' histories hold an answer nobody recorded
        out.append((conversation_key(history, session.tools_for(turn)), dict(turn.recorded)))
        history.append(turn.recorded)
    return out


def answer_of(message: dict[str, Any]) -> Answer:
    """An assistant message as an engine's answer (tool-call arguments as JSON text)."""
    calls = []
    for k, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") if isinstance(call.get("function"), dict) else call
        args = fn.get("arguments", {})
        calls.append(ToolCall(id=str(call.get("id") or f"call_{k}"), name=str(fn.get("name", "")),
                              arguments=args if isinstance(args, str) else json.dumps(args)))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    content = message.get("content")
    return Answer(content=_text(content) if content is not None else None, tool_calls=tuple(calls),
                  reasoning=reasoning if isinstance(reasoning, str) else None,
                  finish_reason="tool_calls" if calls else "stop")


def _said(messages: list[dict[str, Any]]) -> str:
    if not messages:
        return "no messages"
    last = messages[-1]
    text = " ".join(_text(last.get("content")).split())
    return f"{len(messages)} messages, the last one {last.get('role')!r}: {text[:80]!r}"


class SessionOracleEngine:
    """The chat engine of :class:`SessionOraclePredictor`: a table lookup per turn."""

    name = "session-oracle"

    def __init__(self, answers: dict[str, dict[str, Any]], source: str, first_delay_s: float = 0.0,
                 answer_delay_s: float = 0.0):
        self.answers, self.source = answers, source
        self.first_delay_s, self.answer_delay_s = first_delay_s, answer_delay_s

    async def answer(self, request: TurnRequest, timing: Timing) -> Answer:
        if self.first_delay_s:
            await asyncio.sleep(self.first_delay_s)
        message = self.answers.get(conversation_key(request.messages, request.tools))
        if message is None:
            raise PredictorError(f"session-oracle: session {request.session_id} turn {request.turn}: the table "
                                 f"{self.source} has no answer for this conversation ({_said(request.messages)}, "
                                 f"{len(request.tools)} tools); it answers the sessions its task's generator made "
                                 "the table from, with each earlier turn answered as recorded")
        timing.first()
        if self.answer_delay_s:
            await asyncio.sleep(self.answer_delay_s)
        return answer_of(message)

    async def aclose(self) -> None:
        pass


class SessionOraclePredictor(Predictor):
    """Plays sessions (``chat_engine()``); it has no tensors to ``predict``."""

    name = "session-oracle"

    def load(self) -> None:
        path = self.config.model_path
        if not path:
            raise PredictorError("session-oracle needs its table: a model file (model.graph_path or "
                                 "model.generator)")
        table = read_json(Path(path), "session-oracle: the table", error=PredictorError)
        if not isinstance(table, dict) or table.get("format") != TABLE_FORMAT or not isinstance(
                table.get("turns"), dict):
            raise PredictorError(f"session-oracle: {path} is not a table of turns (format {TABLE_FORMAT}, 'turns')")
        self.answers: dict[str, dict[str, Any]] = table["turns"]
        opts = self.config.options
        self.delays = (float(opts.get("first_token_delay_ms", 0.0)) / 1000.0,
                       float(opts.get("answer_delay_ms", 0.0)) / 1000.0)

    def chat_engine(self) -> SessionOracleEngine:
        return SessionOracleEngine(self.answers, str(self.config.model_path), *self.delays)

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise PredictorError("session-oracle answers session turns (chat_engine()), not tensors")

    def framework_version(self) -> str:
        from mlharness import __version__

        return __version__
