"""The session player: sends one session's turns in order, each with its whole history, after its think time.

A turn is sent ``think_s * think_scale`` seconds after the previous answer ended (the first turn: after
:meth:`SessionPlayer.play` was called), as the user or agent of a recorded session read the answer, ran its tools
and typed before sending the next turn. The wait ends within a few milliseconds of its target: an asyncio sleep
ends a little before it and a short spin on the clock lands the send (asyncio's timers alone can be late by a
millisecond or more), and the wait observed is recorded beside the one asked (``TurnRecord.waited_s``).

Each turn's history is the system prompt, then every earlier turn's messages, each followed by its answer:

- ``history="generated"`` (the default): the engine's own earlier answers, as a real client would send. Where a
  turn's messages are tool results (``role: tool``) and the previous answer called tools, the recorded results are
  given the answer's tool-call ids, in order (a server checks that every result answers a call); where the answer
  called fewer tools than the trace has results for (none, or some), the trace's recorded assistant message is
  put in the history instead, so the results still answer calls, and the turn of that answer says
  ``diverged=True``. The same happens where the answer called tools and the trace's next turn is not their
  results. An answer calling more tools than the trace answered keeps the calls it has results for.
- ``history="recorded"``: the trace's recorded assistant messages, whatever the engine answered (what the MLCommons
  endpoints reference replays: every session's prompts are the same, whichever model answers).

``cache_bust`` prefixes the first system (else user) message with a salt, a short hex of a hash of the run's seed,
the session's id and the repeat: no two sessions share a prefix (a server's prefix cache can reuse a session's own
earlier turns, not another session's), and the salt is the same in a rerun with the same seed. The affinity
header (``X-Session-ID`` for routers that keep a session on one replica) carries the session's id, salted alike.

A failed turn (the engine raised a :class:`~mlharness.errors.PredictorError`, or gave no answer within
``turn_timeout_s``) ends the session: later turns depend on its answer and are not sent; the failure is recorded
in the turn's and the session's ``error``. Any other exception is a bug and is raised.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mlharness.errors import PredictorError
from mlharness.kinds.sessions.engine import ChatEngine, TurnRequest
from mlharness.kinds.sessions.model import Answer, Session, Turn
from mlharness.kinds.sessions.records import SessionRecord, TurnRecord

HISTORY_MODES = ("generated", "recorded")
SPIN_S = 0.003  # the last part of a think time, waited on the clock rather than a timer


@dataclass
class ReplayOptions:
    history: str = "generated"  # "generated": the engine's own earlier answers; "recorded": the trace's
    affinity_header: str | None = None  # e.g. "X-Session-ID": sent on every turn with the session's id
    cache_bust: bool = False  # a per-session salt before the first system/user message
    max_tokens: int = 1024  # a turn's cap where the turn states none
    think_scale: float = 1.0  # think times are multiplied by this (0: send each turn at once)
    turn_timeout_s: float | None = 600.0  # a turn with no answer by then fails its session
    extra_body: dict[str, Any] = field(default_factory=dict)  # request fields (temperature, seed...)
    salt_seed: int = 0  # the run's seed: the cache-bust salt is a hash of it, the session's id and the repeat
    # session id -> plays so far, counted over every player sharing these options (a run's players do)
    _plays: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.history not in HISTORY_MODES:
            raise PredictorError(f"replay option history is {self.history!r}; use one of {', '.join(HISTORY_MODES)}")
        if not self.think_scale >= 0:
            raise PredictorError(f"replay option think_scale is {self.think_scale!r}; use a number >= 0")
        if self.turn_timeout_s is not None and not self.turn_timeout_s > 0:
            raise PredictorError(f"replay option turn_timeout_s is {self.turn_timeout_s!r}; use a positive number "
                                 f"of seconds, or None for no limit")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise PredictorError(f"replay option max_tokens is {self.max_tokens!r}; use a whole number >= 1")


def salt(seed: int, session_id: str, repeat: int = 0) -> str:
    """The cache-bust salt of one play of a session: 12 hex digits of a hash of (seed, id, repeat)."""
    return hashlib.blake2b(f"{seed}\0{session_id}\0{repeat}".encode(), digest_size=6).hexdigest()


def salted(message: dict[str, Any], tag: str) -> dict[str, Any]:
    """``message`` with ``[salt: TAG]`` before its content (a text part first where the content is a list)."""
    content = message.get("content")
    prefix = f"[salt: {tag}]\n\n"
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": prefix}, *content]}
    return {**message, "content": prefix + (content or "")}


class _Timing:
    """The engine's ``timing``: the clock's reading at the answer's first fragment."""

    __slots__ = ("clock", "at")

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.at: float | None = None

    def first(self) -> None:
        if self.at is None:
            self.at = self.clock()


class SessionPlayer:
    """Plays sessions against one engine. ``clock`` and ``sleep`` are injectable (a test's fake time); with
    ``asyncio.sleep`` the last :data:`SPIN_S` of a wait spins on the clock, an injected sleep is trusted to wait
    what it is asked."""

    def __init__(self, engine: ChatEngine, options: ReplayOptions | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep):
        self.engine = engine
        self.options = options or ReplayOptions()
        self.clock = clock
        self.sleep = sleep

    async def play(self, session: Session, index: int = -1, repeat: int | None = None
                   ) -> tuple[SessionRecord, list[Answer]]:
        """Send every turn of ``session``; returns its record and the answers of the turns that were answered
        (all of them unless ``record.error``). ``index``: the LoadGen sample index recorded; ``repeat``: which
        play of this session this is (the salt's; default: how many times players sharing these options played it
        before, warm-up plays included)."""
        o = self.options
        if repeat is None:
            repeat = o._plays.get(session.id, 0)
        o._plays[session.id] = o._plays.get(session.id, 0) + 1
        tag = salt(o.salt_seed, session.id, repeat) if o.cache_bust else None
        headers = {}
        if o.affinity_header:
            headers[o.affinity_header] = session.id if tag is None else f"{session.id}-{tag}"
        start = self.clock()
        record = SessionRecord(session=session.id, index=index, started=start, finished=None,
                               started_unix=time.time())
        answers: list[Answer] = []
        history: list[dict[str, Any]] = []
        if session.system is not None:
            history.append({"role": "system", "content": session.system})
        ready = start  # the previous answer's end: the think time is counted from it
        for k, turn in enumerate(session.turns):
            messages = [dict(m) for m in turn.messages]
            if k > 0:
                previous, diverged = self._previous(session.turns[k - 1], answers[-1], messages)
                history.append(previous)
                record.turns[-1].diverged = diverged
            history.extend(messages)
            if tag is not None and k == 0 and history:
                history[0] = salted(history[0], tag)
            think = turn.think_s * o.think_scale
            await self._wait_until(ready + think)
            request = TurnRequest(session_id=session.id, turn=k, messages=[dict(m) for m in history],
                                  tools=[dict(t) for t in session.tools_for(turn)],
                                  max_tokens=turn.max_tokens or o.max_tokens, headers=dict(headers),
                                  extra_body=dict(o.extra_body))
            answer, turn_record = await self._send(request, turn, think, ready)
            record.turns.append(turn_record)
            if answer is None:
                record.error = f"session {session.id}, turn {k}: {turn_record.error}"
                return record, answers
            answers.append(answer)
            ready = turn_record.done if turn_record.done is not None else self.clock()
        record.finished = self.clock()
        return record, answers

    def _previous(self, turn: Turn, answer: Answer, messages: list[dict[str, Any]]
                  ) -> tuple[dict[str, Any], bool]:
        """The assistant message that answers ``turn`` in the history of the next turn (whose ``messages`` are
        re-keyed in place to the answer's tool-call ids), and whether the answer diverged from the trace."""
        recorded = turn.recorded
        if self.options.history == "recorded":
            return (dict(recorded) if recorded is not None else answer.message()), False
        results = [m for m in messages if m.get("role") == "tool"]
        calls = answer.tool_calls
        if results and len(calls) >= len(results):
            for m, call in zip(results, calls, strict=False):
                m["tool_call_id"] = call.id
            kept = Answer(answer.content, calls[:len(results)], answer.reasoning)
            return kept.message(), False
        if not results and not calls:
            return answer.message(), False
        # the answer did not call the tools whose results the trace sends next (or called some it has none for)
        if recorded is not None:
            return dict(recorded), True
        return Answer(answer.content).message(), True

    async def _wait_until(self, target: float) -> None:
        spin = self.sleep is asyncio.sleep
        while True:
            left = target - self.clock()
            if left <= 0:
                return
            if not spin:
                await self.sleep(left)
            elif left > SPIN_S:
                await self.sleep(left - SPIN_S)
            else:
                await asyncio.sleep(0)  # yield to the loop's other sessions while the last milliseconds pass

    async def _send(self, request: TurnRequest, turn: Turn, think: float, ready: float
                    ) -> tuple[Answer | None, TurnRecord]:
        timing = _Timing(self.clock)
        sent = self.clock()
        rec = TurnRecord(session=request.session_id, turn=request.turn, sent=sent, first=None, done=None,
                         think_s=think, waited_s=sent - ready)
        limit = self.options.turn_timeout_s
        try:
            answer = await asyncio.wait_for(self.engine.answer(request, timing), limit)
        except (asyncio.TimeoutError, TimeoutError):
            rec.first = timing.at
            rec.error = f"no answer within {limit:g} s (turn_timeout_s)"
            return None, rec
        except PredictorError as e:
            rec.first = timing.at
            rec.error = str(e)
            return None, rec
        rec.done = self.clock()
        # an engine that never said when its first fragment came (a whole answer at once): first is done
        rec.first = timing.at if timing.at is not None else rec.done
        rec.prompt_tokens, rec.completion_tokens = answer.prompt_tokens, answer.completion_tokens
        rec.cached_tokens = answer.cached_tokens
        rec.tool_calls = len(answer.tool_calls)
        return answer, rec
