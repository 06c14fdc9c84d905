"""What a ``type: session`` input is: each sample one :class:`~mlharness.kinds.sessions.model.Session`, and how the run
plays them (the input's ``parameters``).

``preprocess`` returns a ``Session`` (what :func:`mlharness.kinds.sessions.traces.load_trace` gives), or a dict of the
same fields (``id``, ``turns``: a list of dicts of ``messages``, ``think_s``, ``tools``, ``recorded``,
``max_tokens``; ``system``, ``tools``, ``start_s``, ``meta``), which :func:`session_sample` turns into one at load
time, untimed; a sample that is neither is refused naming the sample and the field (exit status 2).

The input's ``parameters`` are the replay options (:class:`~mlharness.kinds.sessions.replay.ReplayOptions`' field names:
``history``, ``affinity_header``, ``cache_bust``, ``max_tokens``, ``think_scale``, ``turn_timeout_s``,
``extra_body``), how Offline starts its sessions (``timing``: ``recorded``, each at its ``start_s`` after the
query's issue, or ``asap``; ``concurrency``: at most this many sessions in flight) and the service levels of the
goodput over sessions (``slo_ttft_ms``, ``slo_tpot_ms``, ``slo_session_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlharness.errors import HookError, ManifestError
from mlharness.kinds.sessions.model import Session, Turn
from mlharness.loadgen.qsl import InputKind

SESSION_INPUT = "session"
REPLAY_FIELDS = {"history": str, "affinity_header": str, "cache_bust": bool, "max_tokens": int,
                 "think_scale": float, "turn_timeout_s": float, "extra_body": dict}
TIMINGS = ("recorded", "asap")
SLO_FIELDS = ("slo_ttft_ms", "slo_tpot_ms", "slo_session_ms")


@dataclass(frozen=True)
class SessionSettings:
    """The ``parameters`` of a session input, checked."""

    replay: dict[str, Any] = field(default_factory=dict)  # ReplayOptions keyword arguments
    timing: str = "recorded"  # Offline: start each session at its start_s after the issue, or at once (asap)
    concurrency: int | None = None  # Offline: sessions in flight at most (None: no bound)
    slo: dict[str, float] = field(default_factory=dict)  # slo_ttft_ms / slo_tpot_ms / slo_session_ms given


def session_settings(params: dict[str, Any] | None, manifest: Any, where: str = "inputs[0].parameters"
                     ) -> SessionSettings:
    """The checked settings of a session input's ``parameters``; an unknown key or a wrong value is refused naming
    the field."""
    params = dict(params or {})
    replay: dict[str, Any] = {}
    slo: dict[str, float] = {}

    def bad(key: str, message: str) -> ManifestError:
        return ManifestError(manifest, f"{where}.{key}", message)

    for key, value in params.items():
        if key in REPLAY_FIELDS:
            kind = REPLAY_FIELDS[key]
            if value is None and key in ("affinity_header", "turn_timeout_s"):
                replay[key] = None
                continue
            ok = isinstance(value, int | float) and not isinstance(value, bool) if kind is float else (
                isinstance(value, kind) and not (kind is int and isinstance(value, bool)))
            if not ok:
                raise bad(key, f"expected {kind.__name__}, got {value!r}")
            if key == "history" and value not in ("generated", "recorded"):
                raise bad(key, f"'{value}': expected generated or recorded")
            if kind in (int, float) and value <= 0 and key != "think_scale" or key == "think_scale" and value < 0:
                raise bad(key, f"{value!r}: must be positive")
            replay[key] = float(value) if kind is float else value
        elif key in SLO_FIELDS:
            if value is None:
                continue
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise bad(key, f"{value!r}: a service level is a positive number of milliseconds")
            slo[key] = float(value)
        elif key == "timing":
            if value not in TIMINGS:
                raise bad(key, f"{value!r}: expected one of {', '.join(TIMINGS)}")
        elif key == "concurrency":
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise bad(key, f"{value!r}: expected a whole number of sessions, at least 1")
        else:
            known = [*REPLAY_FIELDS, *SLO_FIELDS, "timing", "concurrency"]
            raise bad(key, f"unknown parameter of a session input; known: {', '.join(known)}")
    return SessionSettings(replay=replay, timing=params.get("timing", "recorded"),
                           concurrency=params.get("concurrency"), slo=slo)


class BadSessionInput(HookError):
    """A sample ``preprocess`` returned that is not a session: the user's input (exit status 2)."""


def session_sample(out: Any, index: int, manifest: str) -> np.ndarray:
    """``preprocess``'s session for sample ``index``, checked and kept as a 0-d object array (the store gathers it
    like a chat prompt)."""
    try:
        session = out if isinstance(out, Session) else as_session(out)
    except (TypeError, ValueError) as e:
        raise BadSessionInput("preprocess", manifest, f"sample {index}: {e}") from None
    if not session.turns:
        raise BadSessionInput("preprocess", manifest, f"sample {index}: session '{session.id}' has no turns")
    cell = np.empty((), dtype=object)
    cell[()] = session
    return cell


def as_session(data: Any) -> Session:
    """A dict of a Session's fields as a Session; TypeError/ValueError naming the field that is wrong."""
    if not isinstance(data, dict):
        raise TypeError(f"returned {type(data).__name__}; a session input's preprocess returns a Session or a "
                        "dict with 'id' and 'turns'")
    unknown = set(data) - {"id", "turns", "system", "tools", "start_s", "meta"}
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(map(str, unknown)))} (a session has id, turns, system, "
                         "tools, start_s, meta)")
    if not isinstance(data.get("id"), str | int) or isinstance(data.get("id"), bool):
        raise ValueError("field 'id': a session needs an id (a string)")
    turns = data.get("turns")
    if not isinstance(turns, list | tuple):
        raise ValueError("field 'turns': expected a list of turns")
    start = data.get("start_s", 0.0)
    if not isinstance(start, int | float) or isinstance(start, bool) or start < 0:
        raise ValueError(f"field 'start_s': {start!r} is not a time in seconds (>= 0)")
    return Session(id=str(data["id"]), turns=tuple(_turn(t, k) for k, t in enumerate(turns)),
                   system=data.get("system"), tools=tuple(data.get("tools") or ()), start_s=float(start),
                   meta=dict(data.get("meta") or {}))


def _turn(t: Any, k: int) -> Turn:
    if not isinstance(t, dict):
        raise ValueError(f"field 'turns[{k}]': expected a dict with 'messages', got {type(t).__name__}")
    unknown = set(t) - {"messages", "think_s", "tools", "recorded", "max_tokens"}
    if unknown:
        raise ValueError(f"field 'turns[{k}]': unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    messages = t.get("messages")
    if not isinstance(messages, list | tuple) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ValueError(f"field 'turns[{k}].messages': expected a list of chat messages (dicts with a 'role')")
    think = t.get("think_s", 0.0)
    if not isinstance(think, int | float) or isinstance(think, bool) or think < 0:
        raise ValueError(f"field 'turns[{k}].think_s': {think!r} is not a time in seconds (>= 0)")
    cap = t.get("max_tokens")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise ValueError(f"field 'turns[{k}].max_tokens': {cap!r} is not a positive whole number")
    tools = t.get("tools")
    return Turn(messages=tuple(messages), think_s=float(think), tools=None if tools is None else tuple(tools),
                recorded=t.get("recorded"), max_tokens=cap)


def make_input(ctx: dict[str, Any], manifest: str) -> InputKind:
    return InputKind(sample=lambda out, index: session_sample(out, index, manifest))
