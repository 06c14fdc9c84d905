"""Deadlines of the ``openai`` predictor's requests, kept by the event loop that runs them.

A server can hold a request open without ever finishing it: silent after the connection, sending SSE keep-alive
comments (``: ping``) forever, or trickling a byte at a time. A socket read timeout does not catch the last two
(each byte resets it). So each request has a :class:`RequestClock` (the deadline it is under now, which only
token-carrying chunks move on) and a :class:`Watchdog`: one timer of the event loop at the clock's deadline. When
it fires and the deadline has not moved, the request's task is cancelled (wherever it waits: connecting, sending,
reading); when a token moved the deadline on, the timer is set again for the new one. Moving the deadline later
costs a float assignment per chunk, never a timer; only a deadline moved earlier (a token gap shorter than the
time left to the first token) sets the timer again at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Deadlines:
    """Seconds a request may take (the ``openai`` framework options of the same names)."""

    connect: float = 10.0  # connect_timeout_s: TCP (and TLS) connection
    first_byte: float = 30.0  # first_byte_timeout_s: request sent -> response headers
    first_token: float = 60.0  # first_token_timeout_s: request sent -> first chunk carrying tokens
    token_gap: float = 30.0  # token_gap_timeout_s: between two chunks carrying tokens (keep-alives do not count)
    total: float = 600.0  # deadline_s: the whole request, retries included

    def longest_read(self) -> float:
        return max(self.first_byte, self.first_token, self.token_gap)


OPTION_NAMES = {"connect": "connect_timeout_s", "first_byte": "first_byte_timeout_s",
                "first_token": "first_token_timeout_s", "token_gap": "token_gap_timeout_s", "total": "deadline_s"}
WHAT = {"first_byte": "no response headers", "first_token": "no token", "token_gap": "no new token"}


class RequestClock:
    """The deadline a request is under now: the response headers, then its first token, then each next token,
    always within its whole-request deadline. Only the event loop's thread moves it on."""

    def __init__(self, limits: Deadlines, total: float | None = None):
        self.limits = limits
        self.started = time.monotonic()
        self.end = self.started + (limits.total if total is None else total)
        self.phase = "first_byte"
        self.phase_started = self.started
        self.due = min(self.end, self.started + limits.first_byte)
        self.watchdog: Watchdog | None = None  # told when the deadline moves earlier than it waits for

    def send(self) -> None:
        """A (new) try of the request is sent: it waits for the response headers."""
        self._enter("first_byte", self.limits.first_byte)

    def connecting(self) -> None:
        """The try waits for a new connection (the connect, under its own deadline, connect_timeout_s): only the
        whole-request deadline runs beside it until :meth:`send`."""
        self.phase, self.phase_started, self.due = "connecting", time.monotonic(), self.end

    def headers(self) -> None:
        """The response headers arrived: the first token is due ``first_token`` after the request was sent."""
        self.phase = "first_token"
        self.due = min(self.end, self.phase_started + self.limits.first_token)
        if self.watchdog is not None and self.due < self.watchdog.armed:
            self.watchdog.arm()

    def token(self) -> None:
        """A chunk carrying tokens arrived: the next one is due ``token_gap`` from now."""
        self._enter("token_gap", self.limits.token_gap)

    def finishing(self, seconds: float) -> None:
        """The server said the stream ended: the rest of its body (the connection's return to the pool) may
        take ``seconds``; past them the connection is closed, and the answer stands."""
        self._enter("finishing", seconds)

    def _enter(self, phase: str, seconds: float) -> None:
        self.phase, self.phase_started = phase, time.monotonic()
        self.due = min(self.end, self.phase_started + seconds)
        if self.watchdog is not None and self.due < self.watchdog.armed:
            self.watchdog.arm()

    def left(self) -> float:
        return self.due - time.monotonic()

    def expired(self) -> bool:
        return self.left() <= 0

    def overdue(self) -> str:
        """Which deadline passed, as an error message's clause naming the option that sets it."""
        if time.monotonic() >= self.end:
            return (f"the request passed its whole deadline ({OPTION_NAMES['total']} = "
                    f"{self.end - self.started:g} s)")
        if self.phase not in WHAT:
            return f"the rest of the response's body did not arrive ({self.phase})"
        seconds = {"first_byte": self.limits.first_byte, "first_token": self.limits.first_token,
                   "token_gap": self.limits.token_gap}[self.phase]
        return f"{WHAT[self.phase]} within {seconds:g} s ({OPTION_NAMES[self.phase]})"


class Watchdog:
    """Cancels ``task`` once ``clock``'s deadline passes (see the module's docstring); ``fired`` says it did. The
    clock re-arms it when its deadline moves earlier than the one it waits for (a later one costs nothing)."""

    __slots__ = ("loop", "clock", "task", "fired", "armed", "_handle", "_offset")

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: RequestClock, task: asyncio.Task[Any]):
        self.loop, self.clock, self.task = loop, clock, task
        self.fired = False
        self._offset = loop.time() - time.monotonic()  # the loop's clock against time.monotonic
        self._handle: asyncio.TimerHandle | None = None
        self.armed = 0.0
        self.arm()
        clock.watchdog = self

    def arm(self) -> None:
        """Wait for the clock's deadline as it is now."""
        if self._handle is not None:
            self._handle.cancel()
        self.armed = self.clock.due
        self._handle = self.loop.call_at(self.armed + self._offset, self._check)

    def _check(self) -> None:
        self._handle = None
        if self.clock.left() > 0:  # a token moved the deadline on: wait for the new one
            self.arm()
            return
        self.fired = True
        self.task.cancel()

    def clear(self) -> None:
        """The request's try ended: no cancel may reach its task any more."""
        self.clock.watchdog = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self.fired and hasattr(self.task, "uncancel"):
            self.task.uncancel()
