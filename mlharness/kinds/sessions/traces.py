"""Traces users bring, read as sessions: ``load_trace(path, fmt="auto") -> list[Session]``.

:data:`FORMATS` names each format with its reader and a line saying what it is; ``fmt="auto"`` tells them apart by
the first record's fields. A malformed trace raises :class:`~mlharness.kinds.sessions.trace_rows.TraceError` (a
``DatasetError``: the CLI exits 2) naming the file, the record's line and the field, so a trace of a thousand
conversations can be fixed where it is wrong. The formats' readers live beside this module: the MLCommons endpoints
agentic trace (``trace_agentic``), Mooncake's block-hash traces (``trace_mooncake``); ShareGPT's conversations are
read here. docs/sessions.md ("Trace formats") says what each holds and how the formats other tools read compare.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness import numbers
from mlharness.errors import DatasetError
from mlharness.kinds.sessions.model import Session, Turn
from mlharness.kinds.sessions.trace_agentic import read_agentic
from mlharness.kinds.sessions.trace_mooncake import read_mooncake
from mlharness.kinds.sessions.trace_rows import (
    RECORDED_WHY,
    TURNS_WHY,
    Fields,
    TraceError,
    iter_records,
    read_records,
    shown,
    tool_calls,
)
from mlharness.numbers import MAX_RECORDED_S, MAX_TURNS

log = logging.getLogger(__name__)

# ShareGPT's speaker names (ShareGPT itself, its cleaned splits, LLaMA-Factory's tool-calling variant)
SPEAKERS = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
            "bard": "assistant", "bing": "assistant", "model": "assistant", "system": "system",
            "function_call": "function_call", "observation": "tool", "tool": "tool", "function": "tool"}


@dataclass(frozen=True)
class TraceFormat:
    name: str
    read: Callable[[Path], list[Session]]
    description: str


def read_sharegpt(path: Path) -> list[Session]:
    sessions: list[Session] = []
    ids: dict[str, int] = {}
    skipped = 0
    for index, (line, record) in enumerate(read_records(path)):
        f = Fields(path, line, record)
        s = sharegpt_session(f, index)
        if s is None:
            skipped += 1
            continue
        if s.id in ids:  # ShareGPT's splits repeat some ids; a session id names one session
            ids[s.id] += 1
            s = Session(id=f"{s.id}#{ids[s.id]}", turns=s.turns, system=s.system, tools=s.tools, meta=s.meta)
        ids.setdefault(s.id, 0)
        sessions.append(s)
    if skipped:
        log.warning("%s: %d conversation(s) without a user message skipped", path, skipped)
    if not sessions:
        raise TraceError(path, None, None, "no conversation with a user message")
    return sessions


def sharegpt_messages(f: Fields) -> list[tuple[Fields, dict[str, Any]]]:
    """The conversation as OpenAI messages, each with the fields it came from (for errors)."""
    key = "conversations" if "conversations" in f.row else "messages"
    entries = f.objects(key, required=True)
    out: list[tuple[Fields, dict[str, Any]]] = []
    open_calls: list[str] = []
    for i, entry in enumerate(entries):
        e = f.sub(f"{key}[{i}]", entry)
        if key == "conversations":
            speaker = entry.get("from")
            role = SPEAKERS.get(speaker) if isinstance(speaker, str) else None
            if role is None:
                raise e.error("from", f"expected one of {', '.join(SPEAKERS)}, got {shown(speaker)}")
            value = e.string("value", required=True)
            if role == "function_call":
                msg = function_call(e, value, i)
                open_calls = [c["id"] for c in msg["tool_calls"]]
            elif role == "tool":
                if not open_calls:
                    raise e.error("from", f"a {speaker!r} entry answers no earlier function_call")
                msg = {"role": "tool", "tool_call_id": open_calls.pop(0), "content": value}
            else:
                msg = {"role": role, "content": value}
        else:
            msg = openai_message(e, open_calls)
        out.append((e, msg))
    return out


def function_call(e: Fields, value: str, index: int) -> dict[str, Any]:
    """LLaMA-Factory's ``function_call`` entry (``{"name", "arguments"}``, or a list of them) as tool calls."""
    try:
        calls = json.loads(value)
    except ValueError:
        raise e.error("value", f"a function_call's value is JSON {{\"name\", \"arguments\"}}, got {shown(value)}") \
            from None
    calls = calls if isinstance(calls, list) else [calls]
    out = []
    for k, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise e.error("value", f"a function_call names a function, got {shown(call)}")
        args = call.get("arguments", {})
        out.append({"id": f"call_{index}_{k}", "type": "function",
                    "function": {"name": call["name"],
                                 "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return {"role": "assistant", "content": None, "tool_calls": out}


def openai_message(e: Fields, open_calls: list[str]) -> dict[str, Any]:
    role = e.row.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise e.error("role", f"expected \"system\", \"user\", \"assistant\" or \"tool\", got {shown(role)}")
    content = e.row.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise e.error("content", f"expected a string, got {shown(content)}")
    msg: dict[str, Any] = {"role": role, "content": content}
    if role == "assistant":
        calls = tool_calls(e)
        if calls:
            msg["tool_calls"] = calls
            open_calls[:] = [c["id"] for c in calls]
    elif role == "tool":
        call_id = e.string("tool_call_id", required=True, nonempty=True)
        if call_id not in open_calls:
            raise e.error("tool_call_id", f"{shown(call_id)} matches no tool call of the assistant message before")
        msg["tool_call_id"] = call_id
    elif content is None:
        raise e.error("content", f"a {role} message needs content")
    return msg


def sharegpt_session(f: Fields, index: int) -> Session | None:
    messages = sharegpt_messages(f)
    system = f.string("system")
    if system is None and messages and messages[0][1]["role"] == "system":
        system = messages.pop(0)[1]["content"]
    tools = f.get("tools", [])
    if isinstance(tools, str):  # LLaMA-Factory writes the tools as JSON text
        try:
            tools = json.loads(tools) if tools.strip() else []
        except ValueError:
            raise f.error("tools", f"expected a list of tools (or its JSON text), got {shown(tools)}") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise f.error("tools", f"expected a list of tool objects, got {shown(tools)}")
    turns: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for _e, msg in messages:
        client = any(m["role"] in ("user", "tool") for m in pending)
        if msg["role"] != "assistant":
            pending.append(msg)
        elif client:
            turns.append({"messages": pending, "recorded": msg})
            pending = []
        elif not turns:
            pending.append(msg)  # an answer before any user message: history of the first turn
        else:
            merge(turns[-1]["recorded"], msg)  # two answers in a row: one answer
    if any(m["role"] in ("user", "tool") for m in pending):
        turns.append({"messages": pending, "recorded": None})
    if not turns:
        return None
    raw = f.row.get("id", f.row.get("conversation_id"))
    sid = str(raw) if isinstance(raw, (str, int)) and not isinstance(raw, bool) and raw != "" else str(index)
    return Session(id=sid, system=system, tools=tuple(tools),
                   turns=tuple(Turn(messages=tuple(t["messages"]), recorded=t["recorded"]) for t in turns),
                   meta={"format": "sharegpt", "line": f.line})


def merge(answer: dict[str, Any], more: dict[str, Any]) -> None:
    texts = [t for t in (answer.get("content"), more.get("content")) if isinstance(t, str) and t]
    answer["content"] = "\n\n".join(texts) if texts else None
    if more.get("tool_calls"):
        answer["tool_calls"] = [*answer.get("tool_calls", []), *more["tool_calls"]]


FORMATS: dict[str, TraceFormat] = {
    "agentic": TraceFormat("agentic", read_agentic, "MLCommons endpoints agentic-inference JSONL: one row per "
                           "message (conversation_id, turn, role, content, tool_calls, tool_results, delay_seconds)"),
    "sharegpt": TraceFormat("sharegpt", read_sharegpt, "ShareGPT conversations (JSON array or JSONL): "
                            "conversations [{from, value}] or messages [{role, content}], one session each"),
    "mooncake": TraceFormat("mooncake", read_mooncake, "Mooncake block-hash trace JSONL: timestamp (ms), "
                            "input_length, output_length, hash_ids; prompt text synthesised per 512-token block"),
}


def sniff(path: Path) -> str:
    """The format of a trace, told by its first record's fields (a leading metadata row of the endpoints' agentic
    traces, ``_type: dataset_metadata``, aside)."""
    first = next((r for r in iter_records(path) if not is_metadata(r[1])), None)
    if first is None:
        raise TraceError(path, None, None, "empty trace")
    line, record = first
    if isinstance(record, dict):
        if "conversation_id" in record and "role" in record:
            return "agentic"
        if "input_length" in record or "hash_ids" in record:
            return "mooncake"
        if "conversations" in record or "messages" in record:
            return "sharegpt"
    keys = ", ".join(sorted(record)[:12]) if isinstance(record, dict) else f"not an object: {shown(record)}"
    raise TraceError(path, line, None, f"cannot tell the trace's format from its first record ({keys}); name it: "
                                       f"one of {', '.join(FORMATS)}")


def is_metadata(record: Any) -> bool:
    return isinstance(record, dict) and record.get("_type") == "dataset_metadata"


def load_trace(path: str | Path, fmt: str = "auto") -> list[Session]:
    """The sessions of a trace file, in the file's order."""
    path = Path(path)
    if fmt != "auto" and fmt not in FORMATS:
        close = difflib.get_close_matches(fmt, FORMATS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise DatasetError(f"unknown trace format {fmt!r}{hint}: expected auto or one of {', '.join(FORMATS)}")
    name = sniff(path) if fmt == "auto" else fmt
    sessions = FORMATS[name].read(path)
    check_sessions(sessions, path)
    log.info("%s: %d sessions, %d turns (%s trace)", path, len(sessions), sum(len(s.turns) for s in sessions), name)
    return sessions


def check_sessions(sessions: list[Session], path: str | Path, think_scale: float = 1.0) -> None:
    """Refuse, before LoadGen starts, a session of more than :data:`~mlharness.numbers.MAX_TURNS` turns, or one
    whose recorded timing (its start, then its turns' think times times ``think_scale``) would outlast
    :data:`~mlharness.numbers.MAX_RECORDED_S`: a replay waits out those times, and the run would seem to hang.
    The error names the session's first row and the turn."""
    for s in sessions:
        line = s.meta.get("line")
        if len(s.turns) > MAX_TURNS:
            raise TraceError(path, line, None, f"session {s.id!r} has {len(s.turns)} turns; at most {MAX_TURNS} "
                             f"({TURNS_WHY})")
        total = s.start_s
        for k, turn in enumerate(s.turns):
            total += turn.think_s * think_scale
            if not total <= MAX_RECORDED_S:
                scaled = f" times --think-scale {numbers.fmt(think_scale)}" if think_scale != 1 else ""
                raise TraceError(path, line, f"turns[{k}].think_s", f"session {s.id!r} would wait "
                                 f"{numbers.fmt(total)} s (its start, then its think times{scaled}) by turn {k}; a "
                                 f"replay's recorded timing must end within {numbers.fmt(MAX_RECORDED_S)} s "
                                 f"({RECORDED_WHY})")
