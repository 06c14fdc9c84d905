"""The MLCommons endpoints agentic-inference trace: one JSON row per message, grouped into conversations.

The reference (mlcommons/endpoints ``src/inference_endpoint/dataset_manager/agentic_inference_dataset.py``, schema
in ``scripts/agentic_inference_dataset_schema.json``) is what qwen3.6-27b's performance dataset is written for, so
this reader builds sessions as the reference builds its requests, and refuses what the reference refuses:

- rows of one ``conversation_id`` are consecutive in the file; ``turn`` numbers them 1, 2, ..., N (the file's order
  within a conversation does not matter: the reference sorts by turn);
- roles follow ``user → assistant → (tool → assistant)* → user ...``: a ``tool`` row follows an assistant row that
  called tools, a ``user`` row never directly follows one, two assistant rows never touch;
- each client row (``user`` or ``tool``) is a turn, the assistant row after it is the turn's recorded answer; a tool
  row's ``tool_results`` become one ``role: tool`` message each;
- the system prompt is the first non-empty ``system`` of the conversation; ``tools`` and the max-tokens fields of the
  first user row hold for every client row that names none (a client row naming other tools gets them as the
  turn's own); ``delay_seconds`` is the think time before the turn (the reference sleeps it when told to inject
  tool delays);
- the recorded assistant message keeps ``reasoning_content`` and ``name`` where the row has them, as the
  reference's history does (a replay with ``history: recorded`` sends the same messages the reference sends).

Beyond the reference, a tool result whose ``tool_call_id`` answers no earlier tool call of its conversation is
refused: the reference leaves that pairing to the converter, and a replay that re-keys tool results to the
engine's own call ids needs it right. Rows whose ``_type`` is ``dataset_metadata`` are skipped, as there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.kinds.sessions.model import Session, Turn
from mlharness.kinds.sessions.trace_rows import (
    RECORDED_WHY,
    Fields,
    TraceError,
    read_records,
    shown,
    tool_calls,
)
from mlharness.numbers import MAX_RECORDED_S

ROLES = ("user", "assistant", "tool")
# what may follow each role (the reference's state machine; "start" is before the first row)
NEXT = {"start": ("user",), "user": ("assistant",), "assistant": ("tool", "user"), "tool": ("assistant", "user")}
# per-turn sampling fields the reference forwards in a client row's request (kept in Session.meta["turn_params"])
PARAMS = ("model", "temperature", "top_p", "top_k", "seed", "stop", "repetition_penalty", "frequency_penalty",
          "presence_penalty", "n", "logit_bias", "stream", "chat_template", "user")
MAX_TOKENS = ("max_new_tokens", "max_completion_tokens", "max_tokens")


def read_agentic(path: Path) -> list[Session]:
    conversations: dict[str, list[Fields]] = {}
    last_line: dict[str, int] = {}
    current = None
    for line, row in read_records(path):
        if row.get("_type") == "dataset_metadata":
            continue
        f = Fields(path, line, row)
        cid = conversation_id(f)
        if cid != current and cid in conversations:
            raise f.error("conversation_id", f"rows of conversation {cid!r} are not consecutive (its earlier rows "
                                             f"end at line {last_line[cid]}): keep each conversation's rows together")
        current = cid
        f.integer("turn", required=True)
        role = row.get("role")
        if role not in ROLES:
            raise f.error("role", f"expected \"user\", \"assistant\" or \"tool\", got {shown(role)}")
        conversations.setdefault(cid, []).append(f)
        last_line[cid] = line
    if not conversations:
        raise TraceError(path, None, None, "no conversation rows (an agentic trace has one JSON row per message)")
    return [conversation(cid, rows) for cid, rows in conversations.items()]


def conversation_id(f: Fields) -> str:
    raw = f.row.get("conversation_id")
    if raw is None:
        raise f.error("conversation_id", "missing (every row names its conversation)")
    if isinstance(raw, bool) or not isinstance(raw, (str, int)) or str(raw) == "":
        raise f.error("conversation_id", f"expected a non-empty string, got {shown(raw)}")
    cid = str(raw)
    if any(not 32 <= ord(c) <= 126 for c in cid):
        raise f.error("conversation_id", f"{shown(cid)} has a non-printable or non-ASCII character")
    return cid


def ordered(cid: str, rows: list[Fields]) -> list[Fields]:
    """The rows by turn, which must be 1, 2, ..., N for N rows. Checked in file order, so that the row named is the
    one to fix: a turn past N, or a turn's second row (N rows below N with no repeat are exactly 1..N)."""
    seen: dict[int, int] = {}
    for f in rows:
        turn = f.row["turn"]
        if turn > len(rows):
            raise f.error("turn", f"turn {turn} in conversation {cid!r} of {len(rows)} rows: turns are numbered "
                                  f"1, 2, 3, ... with no gaps")
        if turn in seen:
            raise f.error("turn", f"turn {turn} of conversation {cid!r} appears twice (also at line {seen[turn]})")
        seen[turn] = f.line
    return sorted(rows, key=lambda f: f.row["turn"])


def conversation(cid: str, rows: list[Fields]) -> Session:
    rows = ordered(cid, rows)
    state, calls_open = "start", False
    called: set[str] = set()
    messages: list[list[dict[str, Any]] | dict[str, Any]] = []  # per row: a client row's messages, an answer
    for f in rows:
        role = f.row["role"]
        check_optional(f)
        if role not in NEXT[state]:
            raise f.error("role", role_error(cid, state, role))
        if role == "assistant":
            msg = assistant_message(f)
            calls = msg.get("tool_calls") or ()
            called.update(c["id"] for c in calls)
            calls_open = bool(calls)
            messages.append(msg)
        elif role == "tool":
            if not calls_open:
                raise f.error("role", f"a 'tool' row of conversation {cid!r} follows an assistant row that called "
                                      "no tools")
            messages.append(tool_messages(f, cid, called))
            calls_open = False
        else:
            if calls_open:
                raise f.error("role", f"a 'user' row of conversation {cid!r} follows an assistant row with "
                                      "tool_calls: a 'tool' row with their results comes first")
            content = f.row.get("content")
            if not isinstance(content, (str, list)) or not content:
                raise f.error("content", f"a user row needs non-empty content, got {shown(content)}")
            msg = {"role": "user", "content": content}
            if f.string("name"):
                msg["name"] = f.row["name"]
            messages.append([msg])
        state = role
    return build_session(cid, rows, messages)


def check_optional(f: Fields) -> None:
    """The optional fields any row may carry, checked on every row: the reference reads them from client rows,
    but a malformed one anywhere is a malformed trace."""
    f.string("system")
    f.objects("tools")
    f.number("delay_seconds", maximum=MAX_RECORDED_S, unit=" s", why=RECORDED_WHY)
    max_tokens(f)


def role_error(cid: str, state: str, role: str) -> str:
    if state == "start":
        return f"conversation {cid!r} starts with a {role!r} row: its first row is the user's message"
    if role == "assistant":
        return f"two 'assistant' rows in a row in conversation {cid!r}: a user or tool row comes between answers"
    return f"a {role!r} row follows a {state!r} row in conversation {cid!r}: the assistant's answer is missing"


def assistant_message(f: Fields) -> dict[str, Any]:
    calls = tool_calls(f)
    content = f.row.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise f.error("content", f"expected a string or null, got {shown(content)}")
    if not content and not calls:
        raise f.error("content", "an assistant row needs non-empty content or non-empty tool_calls")
    msg: dict[str, Any] = {"role": "assistant", "content": content if content else None}
    if calls:
        msg["tool_calls"] = calls
    for key in ("name", "reasoning_content"):
        if f.string(key) is not None:
            msg[key] = f.row[key]
    return msg


def tool_messages(f: Fields, cid: str, called: set[str]) -> list[dict[str, Any]]:
    results = f.objects("tool_results", required=True, nonempty=True)
    out = []
    for i, result in enumerate(results):
        rf = f.sub(f"tool_results[{i}]", result)
        call_id = rf.string("tool_call_id", required=True, nonempty=True)
        if "content" not in result:
            raise rf.error("content", "missing (a tool result has content, \"\" for none)")
        content = result["content"]
        if not isinstance(content, (str, list)):
            raise rf.error("content", f"expected a string, got {shown(content)}")
        if call_id not in called:
            raise rf.error("tool_call_id", f"{shown(call_id)} matches no earlier tool call of conversation {cid!r}")
        out.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return out


def build_session(cid: str, rows: list[Fields], messages: list) -> Session:
    system = next((f.row["system"] for f in rows if f.string("system")), None)
    first_user = rows[0]  # the role check made it a user row
    tools = tuple(first_user.objects("tools") or ())
    default_cap = max_tokens(first_user)
    turns: list[Turn] = []
    numbers: list[int] = []
    params: dict[int, dict[str, Any]] = {}
    for i, f in enumerate(rows):
        if f.row["role"] == "assistant":
            continue
        own = f.objects("tools")
        think = f.number("delay_seconds", maximum=MAX_RECORDED_S, unit=" s", why=RECORDED_WHY) or 0.0
        recorded = messages[i + 1] if i + 1 < len(rows) and rows[i + 1].row["role"] == "assistant" else None
        cap = max_tokens(f) or default_cap
        turns.append(Turn(messages=tuple(messages[i]), think_s=think,
                          tools=None if own is None or tuple(own) == tools else tuple(own),
                          recorded=recorded, max_tokens=cap))
        numbers.append(f.row["turn"])
        extra = {k: f.row[k] for k in PARAMS if f.row.get(k) is not None}
        if extra:
            params[len(turns) - 1] = extra
    meta: dict[str, Any] = {"format": "agentic", "line": rows[0].line, "turn_numbers": numbers}
    if params:
        meta["turn_params"] = params
    return Session(id=cid, turns=tuple(turns), system=system, tools=tools, meta=meta)


def max_tokens(f: Fields) -> int | None:
    for key in MAX_TOKENS:
        value = f.integer(key)
        if value is not None:
            return value
    return None
