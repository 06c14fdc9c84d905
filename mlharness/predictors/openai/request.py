"""One try of one streamed completion of the ``openai`` predictor, a coroutine of its event loop (aiohttp).

The request's JSON is sent, the response's Server-Sent Events are parsed as the bytes arrive
(:mod:`mlharness.predictors.openai.sse`: every event of a read in one pass) and checked
(:class:`~mlharness.predictors.openai.stream.StreamState`); the first token is handed to the token stream the
moment it exists, from the loop itself. The body is read to its end even after ``data: [DONE]``, so that the
connection goes back to the pool (keep-alive) instead of being closed: a run opens about as many connections as it
has requests in flight at most, not one per request. A server that holds the body open after saying it is done is
given :data:`FINISH_GRACE_S`; then the connection is closed and the answer stands. The request's deadlines are
kept by a :class:`~mlharness.predictors.openai.watch.Watchdog`, which cancels the try wherever it waits.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from typing import Any

import numpy as np

from mlharness.predictors.openai.http import RETRIABLE_STATUS, EndpointError, LineTooLong, retry_after
from mlharness.predictors.openai.sse import SSEParser
from mlharness.predictors.openai.stream import StreamState
from mlharness.predictors.openai.watch import RequestClock, Watchdog

FINISH_GRACE_S = 2.0  # after data: [DONE], the rest of the body may take this long
REFUSAL_BYTES = 500  # of a refusal's body, quoted in its error

try:
    from orjson import dumps as _dumps
except ImportError:  # pragma: no cover - orjson is a dependency
    import json

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj).encode()


def encode(body: dict[str, Any]) -> bytes:
    return _dumps(body)


async def stream_one(session: Any, data: bytes, stream: Any, state: StreamState, clock: RequestClock,
                     closing: Callable[[], bool]) -> np.ndarray:
    """One try: POST ``data`` to ``state.url`` and follow its stream. Returns every new token id, or raises
    :class:`EndpointError` (``retriable`` when another endpoint may answer: unreachable, cut off or timed out)."""
    import aiohttp

    loop = asyncio.get_running_loop()
    clock.send()
    watchdog = Watchdog(loop, clock, asyncio.current_task())  # type: ignore[arg-type]
    answered = None
    try:
        async with session.post(state.url, data=data, trace_request_ctx=clock) as r:
            answered = r
            clock.headers()
            if r.status != 200:
                raise await refused(r, state.url, state.index)
            parser = SSEParser()
            async for chunk in r.content.iter_any():
                if state.done:
                    continue  # the rest of the body after data: [DONE]: read, so the connection is kept
                take(parser.feed(chunk), state, stream, clock)
            if not state.done:
                take(parser.end(), state, stream, clock)
        return state.result()
    except asyncio.CancelledError:
        if watchdog.fired:
            if state.done:
                return state.result()  # only the rest of a finished body was late
            raise state.fail(f"timed out: {clock.overdue()}", retriable=True) from None
        if closing():
            raise state.fail("the openai predictor was closed mid-stream") from None
        raise
    except asyncio.TimeoutError as e:  # aiohttp's connect timeout (options.connect_timeout_s)
        raise state.fail(f"timed out: could not connect within {clock.limits.connect:g} s (connect_timeout_s; "
                         f"{type(e).__name__})", retriable=True) from e
    except aiohttp.ClientError as e:
        if closing():
            raise state.fail("the openai predictor was closed mid-stream") from e
        err = state.fail(f"unreachable, or the connection was cut ({type(e).__name__}: {e})", retriable=True)
        err.reset = answered is None and was_reset(e)
        raise err from e
    except LineTooLong as e:
        raise state.fail(f"a stream with {e}") from e
    finally:
        watchdog.clear()


def was_reset(e: BaseException) -> bool:
    """The server reset the connection, or closed it, before its answer's headers: the request never reached it
    or was dropped unread (a full listen backlog resets connections; a kept-alive one may close as it is reused)."""
    import aiohttp

    if isinstance(e, aiohttp.ServerDisconnectedError):
        return True
    return isinstance(e, aiohttp.ClientOSError) and e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED)


def take(events: list[bytes], state: StreamState, stream: Any, clock: RequestClock) -> None:
    """The events of one read, in order, up to data: [DONE]. They arrived together: the gap to the next token is
    timed from now once, not once an event."""
    arrived = False
    for data in events:
        moved, first = state.take(data)
        arrived = arrived or moved
        if first:
            stream.first(np.asarray(first, dtype=np.int32))
        if state.done:
            clock.finishing(FINISH_GRACE_S)
            return
    if arrived:
        clock.token()


async def refused(r: Any, url: str, index: int) -> EndpointError:
    """The error for a response other than 200, with at most :data:`REFUSAL_BYTES` of its body."""
    text = b""
    while len(text) < REFUSAL_BYTES:
        part = await r.content.read(REFUSAL_BYTES - len(text))
        if not part:
            break
        text += part
    return EndpointError(f"endpoint {url} answered HTTP {r.status} for sample {index} (qsl_idx): "
                         f"{text[:REFUSAL_BYTES].decode(errors='replace')}", retriable=r.status in RETRIABLE_STATUS,
                         status=r.status, retry_after=retry_after(r.headers.get("retry-after")))
