"""Deadlines of the ``openai`` predictor's requests, enforced on every socket read, and the abort of every request in
flight when the predictor closes.

A server can hold a request open without ever finishing it: silent after the connection, sending SSE keep-alive
comments (``: ping``) forever, or trickling a byte at a time. A socket read timeout does not catch the last two
(each byte resets it), and a thread blocked in ``recv`` cannot be stopped from Python. So the HTTP client's
network backend is wrapped: each read of a request's socket is given at most the time left to that request's
current deadline (:class:`RequestClock`, which only token-carrying chunks move on), and :meth:`Watch.abort_all`
shuts every socket down, which wakes a blocked ``recv`` at once (a ``close`` from another thread would not).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
_current = threading.local()  # the RequestClock of the request this thread is sending, if any


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
    always within its whole-request deadline. Only the request's own thread moves it on."""

    def __init__(self, limits: Deadlines, total: float | None = None):
        self.limits = limits
        self.started = time.monotonic()
        self.end = self.started + (limits.total if total is None else total)
        self.phase = "first_byte"
        self.phase_started = self.started
        self.due = min(self.end, self.started + limits.first_byte)

    def send(self) -> None:
        """A (new) try of the request is sent: it waits for the response headers."""
        self._enter("first_byte", self.limits.first_byte)

    def headers(self) -> None:
        """The response headers arrived: the first token is due ``first_token`` after the request was sent."""
        self.phase = "first_token"
        self.due = min(self.end, self.phase_started + self.limits.first_token)

    def token(self) -> None:
        """A chunk carrying tokens arrived: the next one is due ``token_gap`` from now."""
        self._enter("token_gap", self.limits.token_gap)

    def _enter(self, phase: str, seconds: float) -> None:
        self.phase, self.phase_started = phase, time.monotonic()
        self.due = min(self.end, self.phase_started + seconds)

    def left(self) -> float:
        return self.due - time.monotonic()

    def expired(self) -> bool:
        return self.left() <= 0

    def overdue(self) -> str:
        """Which deadline passed, as an error message's clause naming the option that sets it."""
        if time.monotonic() >= self.end:
            return (f"the request passed its whole deadline ({OPTION_NAMES['total']} = "
                    f"{self.end - self.started:g} s)")
        seconds = {"first_byte": self.limits.first_byte, "first_token": self.limits.first_token,
                   "token_gap": self.limits.token_gap}[self.phase]
        return f"{WHAT[self.phase]} within {seconds:g} s ({OPTION_NAMES[self.phase]})"


@contextlib.contextmanager
def watching(clock: RequestClock) -> Iterator[RequestClock]:
    """The block's HTTP reads (on this thread) are bounded by ``clock``."""
    previous = getattr(_current, "clock", None)
    _current.clock = clock
    try:
        yield clock
    finally:
        _current.clock = previous


class Watch:
    """Every connection the client opened, so that :meth:`abort_all` can wake the threads blocked on them."""

    def __init__(self, core: Any):
        self.core = core  # httpcore2 (or httpcore): the exceptions a network stream raises
        self.closing = False
        self._streams: weakref.WeakSet[WatchedStream] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.active = False  # the client's backend is wrapped (else deadlines are checked between SSE lines)

    def add(self, stream: WatchedStream) -> WatchedStream:
        with self._lock:
            self._streams.add(stream)
        return stream

    def abort_all(self) -> None:
        """Stop every request in flight: reads fail from now on, and a blocked ``recv`` returns at once."""
        self.closing = True
        with self._lock:
            streams = list(self._streams)
        for s in streams:
            s.shutdown()

    def bounded(self, timeout: float | None, connecting: bool = False) -> float | None:
        """``timeout`` shortened to the current request's deadline; raises once it passed or on close."""
        if self.closing:
            raise self.core.ReadError("the openai predictor was closed")
        clock = getattr(_current, "clock", None)
        if clock is None:
            return timeout
        left = clock.left()
        if left <= 0:
            raise (self.core.ConnectTimeout if connecting else self.core.ReadTimeout)(clock.overdue())
        return left if timeout is None else min(timeout, left)


class WatchedStream:
    """A network stream whose reads and writes are bounded by the request's clock (see the module's docstring)."""

    def __init__(self, inner: Any, watch: Watch):
        self.inner, self.watch = inner, watch

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self.watch.bounded(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self.watch.bounded(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        inner = self.inner.start_tls(ssl_context, server_hostname, self.watch.bounded(timeout, connecting=True))
        return self.watch.add(WatchedStream(inner, self.watch))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)

    def shutdown(self) -> None:
        sock = self.inner.get_extra_info("socket")
        if sock is None:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError):  # already closed
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class WatchedBackend:
    """The client's network backend, whose connections are :class:`WatchedStream`."""

    def __init__(self, inner: Any, watch: Watch):
        self.inner, self.watch = inner, watch

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> WatchedStream:
        stream = self.inner.connect_tcp(host, port, self.watch.bounded(timeout, connecting=True), local_address,
                                        socket_options)
        return self.watch.add(WatchedStream(stream, self.watch))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        stream = self.inner.connect_unix_socket(path, self.watch.bounded(timeout, connecting=True), socket_options)
        return self.watch.add(WatchedStream(stream, self.watch))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def watched_client(httpx: Any, limits: Deadlines, workers: int, headers: dict[str, str]) -> tuple[Any, Watch]:
    """An ``httpx.Client`` whose connections are watched. httpx has no public hook that reaches the socket of a
    request in flight, so the connection pool's network backend is replaced before the first connection; when
    an httpx version lays its pool out otherwise, the client works unwatched (deadlines are then checked between
    SSE lines, and a read blocks at most the longest deadline) and says so at debug level."""
    timeout = httpx.Timeout(limits.longest_read(), connect=limits.connect)
    client = httpx.Client(headers=headers, timeout=timeout,
                          limits=httpx.Limits(max_connections=workers, max_keepalive_connections=workers))
    core_name = "httpcore2" if httpx.__name__ == "httpx2" else "httpcore"
    try:
        core = importlib.import_module(core_name)
    except ImportError:
        core = None
    watch = Watch(core)
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if core is not None and backend is not None and hasattr(backend, "connect_tcp"):
        pool._network_backend = WatchedBackend(backend, watch)
        watch.active = True
    else:
        log.debug("the %s client's connections cannot be watched; deadlines are checked between SSE lines",
                  httpx.__name__)
    return client, watch
