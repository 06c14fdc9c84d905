"""The event loop of the ``openai`` predictor: one asyncio loop (uvloop's where installed) in a thread of its own
holds every request of the run, up to ``max_concurrency`` at once.

:class:`Runner` takes requests from any thread (``submit``), starts each as a task of the loop while fewer than the
limit run, queues the rest in order, and reports every request back exactly once, from the loop's thread: the
token stream's ``first``, ``done`` and ``fail`` are called by the loop itself, so however many streams are open,
the SUT is called from this one thread (LoadGen then from the SUT's own caller thread). ``close`` cancels what
runs (each request fails once, naming the close) and stops the loop within seconds whatever the servers do.

The connection pool (:func:`open_session`) keeps as many connections as requests in flight, alive between requests;
a run starting ten thousand requests together opens their connections at once, before the server is busy
streaming: a server accepts idle connections fast, while one busy streaming thousands of answers is slow to take up
new ones (connections held back until earlier ones were answered waited there past their deadlines; released on a
timer instead, they overflowed its listen backlog and were reset). Connections the kernel's full queues drop are
retransmitted by TCP within the connect deadline; one the server resets before answering is sent again after a
backoff (:mod:`mlharness.predictors.openai`). The time to connect counts against the connect deadline only: the
response headers' is from the connection's open (:func:`open_session`). Each open stream holds a
socket: :func:`raise_fd_limit` raises the process's soft ``RLIMIT_NOFILE`` to what the
concurrency needs, up to the hard limit.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from mlharness.errors import PredictorError

log = logging.getLogger(__name__)

FD_MARGIN = 256  # descriptors beside the streams' sockets: files, LoadGen's logs, the tokenizer, pipes


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (several times less CPU per socket event), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def loop_name() -> str:
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    return f"uvloop {uvloop.__version__}"


def raise_fd_limit(streams: int, option: str | None) -> int:
    """Make room for ``streams`` open sockets: the soft ``RLIMIT_NOFILE`` is raised toward the hard limit. Returns
    the streams that fit: all of them, or, when the hard limit is lower and ``option`` is None (the default
    concurrency), as many as it allows; with ``option`` (where the figure was set) it is an error."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to raise
        return streams
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = streams + FD_MARGIN
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.debug("could not raise RLIMIT_NOFILE to %d: %s", target, e)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return streams
    fits = max(1, soft - FD_MARGIN)
    if option is not None:
        raise PredictorError(f"{option} = {streams} needs {need} open files, but this process may open only {soft} "
                             f"(RLIMIT_NOFILE, hard limit {hard}): lower it to {fits} or raise the limit "
                             f"(ulimit -n {need})")
    log.info("at most %d requests at once (the open-file limit, RLIMIT_NOFILE, is %d)", fits, soft)
    return fits


async def open_session(headers: dict[str, str], connections: int, connect_s: float) -> Any:
    """The run's aiohttp session (call on the loop): the connect deadline is aiohttp's, every later one the
    request's watchdog (:mod:`mlharness.predictors.openai.watch`), told by the session's trace when a new
    connection starts and ends opening (``trace_request_ctx``: the request's clock)."""
    import aiohttp

    async def connecting(session: Any, ctx: Any, params: Any) -> None:
        """A new connection is to open: the connect is under its own deadline, so only the whole-request deadline
        runs beside it (``RequestClock.connecting``) until it is open."""
        clock = ctx.trace_request_ctx
        if clock is not None:
            clock.connecting()

    async def connected(session: Any, ctx: Any, params: Any) -> None:
        """The new connection is open: the request is sent now; the response headers are due from here."""
        clock = ctx.trace_request_ctx
        if clock is not None:
            clock.send()

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(connecting)
    trace.on_connection_create_end.append(connected)
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=0, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_s)
    return aiohttp.ClientSession(connector=connector, headers=headers, timeout=timeout, auto_decompress=False,
                                 trace_configs=[trace])


class LoopThread:
    """An event loop running in a daemon thread (it never holds the process's exit)."""

    def __init__(self, name: str):
        self.loop = new_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run ``coro`` on the loop and wait for its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout: float) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # already closed
            return
        self.thread.join(timeout)
        if not self.thread.is_alive():
            self.loop.close()


Generate = Callable[[Any, Any], Awaitable[Any]]


class Runner:
    """Requests on the loop, at most ``limit`` at once (see the module's docstring). ``generate(request,
    stream)`` is the coroutine of one request: it returns the answer's ids (or a pair: the ids and the response)
    or raises; the runner reports either to the stream, once."""

    def __init__(self, loop_thread: LoopThread, generate: Generate, limit: int):
        self.lt, self.generate, self.limit = loop_thread, generate, limit
        self.closing = False
        self.active = True  # every deadline is kept wherever a request waits (openai_watch.Watchdog)
        self.running = 0
        self.peak = 0  # the most requests in flight at once
        self.started = 0
        self._queue: collections.deque[tuple[Any, Any]] = collections.deque()
        self._tasks: dict[asyncio.Task[Any], tuple[Any, Any]] = {}
        self._pending = 0  # submitted, not yet reported back
        self._settled = threading.Condition(threading.Lock())

    # -- any thread -------------------------------------------------------------------------------------------
    def submit(self, jobs: list[tuple[Any, Any]]) -> None:
        with self._settled:
            self._pending += len(jobs)
        self.lt.soon(self._take, jobs)

    def drain(self, timeout_s: float | None = None) -> bool:
        with self._settled:
            return self._settled.wait_for(lambda: self._pending == 0, timeout=timeout_s)

    def close(self, wait_s: float) -> int:
        """Fail what runs or waits (each once), within ``wait_s``; returns how many did not report back."""
        self.closing = True
        if not self.lt.loop.is_closed():
            try:
                self.lt.soon(self._cancel_all)
            except RuntimeError:
                pass
        end = time.monotonic() + wait_s
        self.drain(max(0.0, end - time.monotonic()))
        with self._settled:
            return self._pending

    # -- the loop's thread ------------------------------------------------------------------------------------
    def _take(self, jobs: list[tuple[Any, Any]]) -> None:
        self._queue.extend(jobs)
        self._start()

    def _start(self) -> None:
        queue, loop = self._queue, self.lt.loop
        while queue and (self.running < self.limit or self.closing):
            request, stream = queue.popleft()
            self.running += 1
            self.started += 1
            task = loop.create_task(self._job(request, stream))
            self._tasks[task] = (request, stream)
            task.add_done_callback(self._ended)
        if self.running > self.peak:
            self.peak = self.running

    def _cancel_all(self) -> None:
        while self._queue:
            request, stream = self._queue.popleft()
            self.running += 1  # as if started: _report books it
            self._report(stream.fail, PredictorError(f"sample {request.index}: the openai predictor was closed "
                                                     f"before it ran"))
        for task in list(self._tasks):
            task.cancel()

    def _ended(self, task: asyncio.Task[Any]) -> None:
        request, stream = self._tasks.pop(task)
        if task.cancelled():  # cancelled before it began: its coroutine never ran to report
            self._report(stream.fail, PredictorError(f"sample {request.index}: the openai predictor was closed "
                                                     f"before it ran"))

    async def _job(self, request: Any, stream: Any) -> None:
        try:
            if self.closing:
                raise PredictorError(f"sample {request.index}: the openai predictor was closed before it ran")
            ids = await self.generate(request, stream)
        except asyncio.CancelledError:
            self._report(stream.fail, PredictorError(f"sample {request.index}: the openai predictor was closed "
                                                     f"while the request ran"))
        except BaseException as e:  # noqa: BLE001 - every request reports back exactly once
            self._report(stream.fail, e)
        else:
            if isinstance(ids, tuple):  # (ids, response): a text answer, its ids counted (generation.text)
                self._report(functools.partial(stream.done, response=ids[1]), ids[0])
            else:
                self._report(stream.done, ids)

    def _report(self, report: Callable[[Any], None], value: Any) -> None:
        try:
            report(value)
        except BaseException:  # noqa: BLE001 - a failing stream must not stop the loop or the other requests
            log.exception("a token stream's callback failed")
        finally:
            self.running -= 1
            if self._queue:
                self._start()
            with self._settled:
                self._pending -= 1
                if self._pending == 0:
                    self._settled.notify_all()
