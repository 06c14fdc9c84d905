"""HTTP for the ``openai`` predictor: the client library, Server-Sent Events, token ids in streamed completion
chunks, and the endpoints a run sends requests to, balanced by outstanding requests as the gRPC agents are
(:class:`mlharness.agent.client.AgentPool`): an endpoint that fails in a way another may not (refused, 5xx,
timeout) is left out from then on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from mlharness.errors import AgentError, PredictorError

log = logging.getLogger(__name__)

RETRIABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def http_library() -> Any:
    """httpx2 (the maintained continuation of httpx, same API), else httpx."""
    try:
        import httpx2

        return httpx2
    except ImportError:
        try:
            import httpx
        except ImportError as e:
            raise PredictorError("framework 'openai' needs an HTTP client: pip install 'mlharness[openai]'") from e
        return httpx


class EndpointError(AgentError):
    """A request failed; ``retriable`` when another endpoint may succeed (the endpoint went away or is busy)."""

    def __init__(self, message: str, retriable: bool, status: int | None = None):
        super().__init__(message, "UNAVAILABLE" if retriable else "UNKNOWN")
        self.retriable = retriable
        self.status = status  # the HTTP status the server answered with, if it answered


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


def chunk_tokens(choice: dict[str, Any]) -> list[int] | None:
    """Token ids a streamed completion chunk carries, or None when the server sent only text."""
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return [int(t) for t in ids]
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return [int(t.split(":", 1)[1]) for t in tokens]
    return None


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

    def release(self, ep: Endpoint, error: EndpointError | None) -> None:
        """Book a finished request; an endpoint that failed in a retriable way is left out from now on."""
        with self._lock:
            ep.outstanding -= 1
            ep.served += 1
            if error is not None and error.retriable and ep.alive:
                ep.alive = False
                log.warning("endpoint %s failed (%s); sending its requests to the other endpoints", ep.base, error)
