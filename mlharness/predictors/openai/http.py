"""HTTP for the ``openai`` predictor: its errors, Server-Sent Events line by line (the specification's rules, which
the byte-level parser of :mod:`mlharness.predictors.openai.sse` follows), token ids in streamed completion
chunks, and the endpoints a run sends requests to, balanced by outstanding requests as the gRPC agents are
(:class:`mlharness.agent.client.AgentPool`): an endpoint that fails in a way another may not (refused, timed
out, or still answering 429/5xx after the retries) is left out from then on."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from typing import Any

from mlharness.errors import AgentError

log = logging.getLogger(__name__)

# answers that say "try again later": retried with backoff before the first token (RETRIABLE_STATUS)
RETRIABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MAX_LINE = 1 << 20  # one SSE line; a server streaming without newlines is refused, not buffered without end


class EndpointError(AgentError):
    """A request failed; ``retriable`` when another try may succeed (the endpoint went away or is busy);
    ``reset`` when the server reset or closed the connection before answering (a full listen backlog does that
    under load): the endpoint is busy, not gone."""

    def __init__(self, message: str, retriable: bool, status: int | None = None, retry_after: float | None = None,
                 reset: bool = False):
        super().__init__(message)  # no gRPC status: the message says what the server did
        self.retriable = retriable
        self.reset = reset
        self.status = status  # the HTTP status the server answered with, if it answered
        self.retry_after = retry_after  # seconds, from the answer's Retry-After header


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds; None when absent or an HTTP date (then the backoff decides)."""
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


class Endpoint:
    def __init__(self, url: str):
        url = url.rstrip("/")
        self.base = url if url.endswith("/v1") else f"{url}/v1"
        self.outstanding = 0
        self.alive = True
        self.served = 0


def sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The ``data`` of each Server-Sent Event (multi-line data joined by newlines; comments and other fields
    skipped), as the SSE specification dispatches them at each blank line."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


class LineTooLong(ValueError):
    """A server streamed more than a line's limit without a line end."""


def bounded_lines(chunks: Iterator[bytes], limit: int = MAX_LINE) -> Iterator[str]:
    """The lines of a byte stream (``\n``, ``\r\n`` or ``\r``), each at most ``limit`` bytes (LineTooLong beyond)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        while True:
            cut = min((i for i in (pending.find(b"\n"), pending.find(b"\r")) if i >= 0), default=-1)
            if cut < 0 or (pending[cut:cut + 1] == b"\r" and cut + 1 == len(pending)):
                break  # no line end yet, or a \r that may be half of \r\n
            step = 2 if pending[cut:cut + 2] == b"\r\n" else 1
            yield pending[:cut].decode("utf-8", errors="replace")
            pending = pending[cut + step:]
        if len(pending) > limit:
            raise LineTooLong(f"a line of more than {limit} bytes")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", errors="replace")


def chunk_tokens(choice: dict[str, Any]) -> list[int] | None:
    """Token ids a streamed completion chunk carries, or None when the server sent only text. ValueError when
    they are not whole numbers."""
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return [_token_id(t) for t in ids]
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return [_token_id(t.split(":", 1)[1]) for t in tokens]
    return None


def _token_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"token id {value!r} is not a whole number")
    return int(value)


class EndpointPool:
    def __init__(self, urls: list[str]):
        self.endpoints = [Endpoint(u) for u in urls]
        self._lock = threading.Lock()
        self._turn = 0

    def pick(self, exclude: Endpoint | None) -> Endpoint | None:
        """The live endpoint with the fewest outstanding requests (ties taken in turn), booked; None if none."""
        with self._lock:
            live = [e for e in self.endpoints if e.alive and e is not exclude]
            if not live:
                return None
            self._turn += 1
            start = self._turn % len(live)
            best = min(live[start:] + live[:start], key=lambda e: e.outstanding)
            best.outstanding += 1
            return best

    def release(self, ep: Endpoint) -> None:
        """Book a finished request."""
        with self._lock:
            ep.outstanding -= 1
            ep.served += 1

    def give_up(self, ep: Endpoint, error: EndpointError) -> None:
        """Leave an endpoint out from now on (it is gone, or kept failing after the retries)."""
        with self._lock:
            if not ep.alive:
                return
            ep.alive = False
            others = any(e.alive for e in self.endpoints)
        log.warning("endpoint %s failed (%s); %s", ep.base, error,
                    "sending its requests to the other endpoints" if others else "no other endpoint is left")
