"""The ``openai`` predictor's requests spread over several client processes (``client_processes: N``, N > 1).

Where one core is not enough for the client, N worker processes (started with ``multiprocessing``'s ``spawn``
context: nothing is forked from a process that has threads) each run the ordinary request runner
(:mod:`mlharness.predictors.openai.async_runner`) with an ``openai`` predictor of their own: their own event loop,
connection pool, retries, deadlines and checks, up to ``max_concurrency / N`` requests at once each.

The LoadGen process keeps the record: :class:`ProcessClient` deals each request (its sample index and prompt ids)
to the worker with the fewest in flight, over a pipe (a chat prompt's messages, JSON bytes, only the first time a
worker gets that sample; later only its index); the worker sends back, for each request, its first token
ids, then its completion ids or an error message, in batches. One receiving thread of the LoadGen process reads
every worker's pipe and calls the token stream's ``first`` and ``done``/``fail``, exactly once per request, so the
SUT hears from that one thread whatever the number of processes. A worker that dies fails the requests it had in
flight, naming its pid and how it ended; ``close`` stops the workers within seconds (terminated, then killed,
when they do not stop on their own).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

from mlharness.errors import PredictorError

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # a worker's start: importing the client, opening its pool, GET /models
STOP_WAIT_S = 8.0  # close(): how long a worker may take to fail its requests and exit before it is terminated
MAX_PROCESSES = 64


class _Worker:
    """The LoadGen process's handle on one client process."""

    def __init__(self, number: int, process: Any, requests: Connection, events: Connection):
        self.number, self.process, self.requests, self.events = number, process, requests, events
        self.alive = True
        self.in_flight = 0
        self.sent = 0  # requests dealt to it
        self.chats: set[int] = set()  # samples whose chat payload it holds
        self.send_lock = threading.Lock()

    def name(self) -> str:
        return f"openai client process {self.number} (pid {self.process.pid})"

    def ending(self) -> str:
        code = self.process.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"


class ProcessClient:
    """The request runner's interface (``submit``, ``drain``, ``close``, ``peak``, ``limit``) over N client
    processes; ``config`` and ``opts`` are the ``openai`` predictor's (its options hold ``client_processes``)."""

    def __init__(self, config: Any, opts: Any, prefix: Any = None):
        n = opts.client_processes
        self.prefix = prefix  # PrefixCacheWatch: what the workers report of cached prompt tokens
        self.per_process = max(1, -(-opts.workers // n))
        self.limit = self.per_process * n
        self.urls = list(opts.urls)
        options = {k: v for k, v in config.options.items() if k != "client_processes"}
        options["max_concurrency"] = self.per_process
        spec = replace(config, options=options)
        context = multiprocessing.get_context("spawn")
        self.workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._flight: dict[int, tuple[_Worker, Any, Any]] = {}  # request number -> (worker, request, stream)
        self._next = 0
        self.peak = 0
        self.closing = False
        self.model = ""
        try:
            for i in range(n):
                req_read, req_write = context.Pipe(duplex=False)
                ev_read, ev_write = context.Pipe(duplex=False)
                proc = context.Process(target=worker_main, args=(spec, req_read, ev_write), daemon=True,
                                       name=f"mlharness-openai-client-{i + 1}")
                proc.start()
                req_read.close()
                ev_write.close()
                self.workers.append(_Worker(i + 1, proc, req_write, ev_read))
            for w in self.workers:
                self.model = self._started(w, opts.models_timeout_s * len(opts.urls) + START_TIMEOUT_S)
        except BaseException:
            self._stop_all()
            for w in self.workers:
                w.events.close()
            raise
        self.receiver = threading.Thread(target=self._receive, name="openai-procs-receiver", daemon=True)
        self.receiver.start()

    def _started(self, w: _Worker, timeout: float) -> str:
        """The model the worker serves, once it says it is ready; its load error otherwise."""
        try:
            if not w.events.poll(timeout):
                raise PredictorError(f"framework 'openai': {w.name()} did not start within {timeout:g} s")
            message = w.events.recv()
        except (EOFError, OSError):
            w.process.join(5)
            raise PredictorError(f"framework 'openai': {w.name()} {w.ending()} while starting") from None
        if message[0] == "error":
            raise PredictorError(f"{w.name()} could not start: {message[1]}")
        return str(message[1])

    def describe(self) -> dict[str, Any]:
        """The workers, and the endpoints without the counts that only the workers' pools keep (None)."""
        return {"client_processes": [{"pid": w.process.pid, "alive": w.alive, "requests": w.sent}
                                     for w in self.workers],
                "endpoints": [{"url": u, "alive": None, "requests": None} for u in self.urls]}

    # -- any thread -----------------------------------------------------------------------------------------
    def submit(self, jobs: list[tuple[Any, Any]]) -> None:
        from mlharness.predictors.openai.chat_body import is_chat, payload

        batches: dict[int, list[tuple[int, int, Any]]] = {}
        refused = []
        with self._lock:
            live = [w for w in self.workers if w.alive]
            for request, stream in jobs:
                if self.closing or not live:
                    refused.append((request, stream))
                    continue
                w = min(live, key=lambda x: x.in_flight)
                number = self._next
                self._next += 1
                self._flight[number] = (w, request, stream)
                w.in_flight += 1
                w.sent += 1
                if is_chat(request.prompt):  # sent once per worker and sample: None means "the one you hold"
                    prompt = None if request.index in w.chats else payload(request.prompt)
                    w.chats.add(request.index)
                else:
                    prompt = np.asarray(request.prompt).reshape(-1).astype(np.int64).tobytes()
                batches.setdefault(w.number, []).append((number, int(request.index), prompt))
            self.peak = max(self.peak, len(self._flight))
        for request, stream in refused:
            why = "is closed" if self.closing else "has no client process left (each one died)"
            _report(stream.fail, PredictorError(f"sample {request.index}: the openai predictor {why}"))
        for w in self.workers:
            batch = batches.get(w.number)
            if batch:
                try:
                    with w.send_lock:
                        w.requests.send(batch)
                except (OSError, ValueError) as e:  # it died: the receiver fails what it had
                    log.debug("sending to %s: %s", w.name(), e)

    def drain(self, timeout_s: float | None = None) -> bool:
        with self._settled:
            return self._settled.wait_for(lambda: not self._flight, timeout=timeout_s)

    def close(self, wait_s: float) -> int:
        """Stop every worker (each fails what it runs, once) and fail what did not report back; returns 0."""
        with self._lock:
            self.closing = True
        self._stop_all()
        receiver = getattr(self, "receiver", None)
        if receiver is not None:
            receiver.join(wait_s)
        self._fail_left("the openai predictor was closed while the request ran")
        if receiver is None or not receiver.is_alive():
            for w in self.workers:
                w.events.close()
        return 0

    def _stop_all(self) -> None:
        for w in self.workers:
            try:
                with w.send_lock:
                    w.requests.send(None)
            except (OSError, ValueError):
                pass
        end = time.monotonic() + STOP_WAIT_S
        for w in self.workers:
            w.process.join(max(0.1, end - time.monotonic()))
        for w in self.workers:
            if w.process.is_alive():
                log.warning("%s did not stop within %g s of closing; terminated", w.name(), STOP_WAIT_S)
                w.process.terminate()
                w.process.join(2)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(2)
            w.requests.close()

    # -- the receiving thread -------------------------------------------------------------------------------
    def _receive(self) -> None:
        open_ = {w.events: w for w in self.workers}
        sentinels = {w.process.sentinel: w for w in self.workers}
        while open_ or sentinels:
            ready = wait(list(open_) + list(sentinels))
            for obj in ready:
                if obj in sentinels:  # the process ended: read what it sent before, then fail the rest
                    w = sentinels.pop(obj)
                    if w.events in open_:
                        self._read_all(w)
                        del open_[w.events]
                    self._ended(w)
                elif obj in open_:
                    w = open_[obj]
                    try:
                        self._handle(w, w.events.recv())
                    except (EOFError, OSError):
                        del open_[w.events]

    def _read_all(self, w: _Worker) -> None:
        try:
            while w.events.poll():
                self._handle(w, w.events.recv())
        except (EOFError, OSError):
            pass

    def _handle(self, w: _Worker, message: Any) -> None:
        if not isinstance(message, list):  # "closed"
            return
        for kind, number, value in message:
            if kind == "prefix":  # cached prompt tokens the worker's answers reused (requests, tokens)
                if self.prefix is not None:
                    self.prefix.merge(number, value)
                continue
            if kind == "first":
                with self._lock:
                    entry = self._flight.get(number)
                if entry is not None:
                    _report(entry[2].first, np.frombuffer(value, dtype=np.int32).copy())
                continue
            entry = self._pop(number)
            if entry is None:
                continue
            if kind == "done" and isinstance(value, tuple):  # a text answer: ids and response
                response = np.frombuffer(value[1], dtype=np.uint8).copy()
                _report(lambda i, r=response, s=entry[2]: s.done(i, response=r), np.frombuffer(value[0], np.int32).copy())
            elif kind == "done":
                _report(entry[2].done, np.frombuffer(value, dtype=np.int32).copy())
            else:
                _report(entry[2].fail, PredictorError(value))
            self._settle()

    def _pop(self, number: int) -> tuple[_Worker, Any, Any] | None:
        with self._lock:
            entry = self._flight.pop(number, None)
            if entry is not None:
                entry[0].in_flight -= 1
            return entry

    def _settle(self) -> None:
        with self._settled:
            if not self._flight:
                self._settled.notify_all()

    def _ended(self, w: _Worker) -> None:
        w.process.join(2)  # its sentinel is ready: reaped at once, which gives its exit code
        with self._lock:
            w.alive = False
            lost = [(n, e) for n, e in self._flight.items() if e[0] is w]
            for n, _ in lost:
                del self._flight[n]
            w.in_flight = 0
        if lost and not self.closing:
            log.error("%s %s with %d request(s) in flight", w.name(), w.ending(), len(lost))
        for _, (_, request, stream) in lost:
            why = "was closed" if self.closing else f"lost its client: {w.name()} {w.ending()}"
            _report(stream.fail, PredictorError(f"sample {request.index}: the openai predictor {why} while the "
                                                f"request ran"))
        self._settle()

    def _fail_left(self, why: str) -> None:
        with self._lock:
            left = list(self._flight.values())
            self._flight.clear()
        for _, request, stream in left:
            _report(stream.fail, PredictorError(f"sample {request.index}: {why}"))
        self._settle()


def _report(call: Any, value: Any) -> None:
    try:
        call(value)
    except BaseException:  # noqa: BLE001 - a failing stream must not stop the receiver or the other requests
        log.exception("a token stream's callback failed")


# -- the worker process ---------------------------------------------------------------------------------------
class _Sink:
    """The worker's events, sent to the LoadGen process in batches from the worker's event loop."""

    def __init__(self, conn: Connection, prefix: Any = None):
        self.conn = conn
        self.prefix = prefix  # the worker predictor's PrefixCacheWatch: its counts go with the events
        self.prefix_sent = (0, 0)
        self.loop: Any = None
        self.events: list[tuple[str, int, Any]] = []
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.scheduled = False

    def add(self, event: tuple[str, int, Any]) -> None:
        with self.lock:
            self.events.append(event)
            if self.scheduled:
                return
            self.scheduled = True
        try:
            self.loop.call_soon_threadsafe(self.flush)
        except RuntimeError:  # the loop is closed: sent by the last flush
            pass

    def flush(self) -> None:
        with self.send_lock:
            with self.lock:
                events, self.events, self.scheduled = self.events, [], False
            if self.prefix is not None and (self.prefix.requests, self.prefix.tokens) != self.prefix_sent:
                now = (self.prefix.requests, self.prefix.tokens)
                events.append(("prefix", now[0] - self.prefix_sent[0], now[1] - self.prefix_sent[1]))
                self.prefix_sent = now
            if events:
                try:
                    self.conn.send(events)
                except (OSError, ValueError) as e:  # the LoadGen process is gone
                    log.debug("sending events: %s", e)


class _Stream:
    def __init__(self, sink: _Sink, number: int):
        self.sink, self.number = sink, number

    def first(self, ids: Any) -> None:
        self.sink.add(("first", self.number, np.asarray(ids, dtype=np.int32).reshape(-1).tobytes()))

    def done(self, ids: Any, response: Any = None) -> None:
        ids = np.asarray(ids, dtype=np.int32).reshape(-1).tobytes()
        if response is not None:
            ids = (ids, np.asarray(response, dtype=np.uint8).reshape(-1).tobytes())
        self.sink.add(("done", self.number, ids))

    def fail(self, error: BaseException) -> None:
        self.sink.add(("fail", self.number, str(error) or type(error).__name__))


def worker_main(config: Any, requests: Connection, events: Connection) -> None:
    """One client process: an ``openai`` predictor of its own, fed from ``requests`` until ``None`` (or the
    LoadGen process's end), reporting on ``events``."""
    from mlharness.predictors import PREDICTORS
    from mlharness.predictors.generative import TokenRequest

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the LoadGen process's to handle
    predictor = PREDICTORS.get("openai")(config)  # client_processes left out of its options: one loop
    try:
        predictor.load()
    except BaseException as e:  # noqa: BLE001 - said to the LoadGen process, which raises it
        events.send(("error", str(e) or type(e).__name__))
        return
    sink = _Sink(events, predictor.prefix)
    sink.loop = predictor.loop.loop
    chats: dict[int, Any] = {}  # sample index -> its chat payload, as the LoadGen process sent it once
    events.send(("ready", predictor.model))
    try:
        while True:
            try:
                batch = requests.recv()
            except (EOFError, OSError):
                break
            if batch is None:
                break
            predictor.submit([TokenRequest(index, _prompt(chats, index, prompt)) for _, index, prompt in batch],
                             [_Stream(sink, number) for number, _, _ in batch])
    finally:
        predictor.close()
        sink.flush()
        try:
            events.send("closed")
        except (OSError, ValueError):
            pass


def _prompt(chats: dict[int, Any], index: int, prompt: Any) -> Any:
    """A request's prompt in the worker: token ids, or the sample's chat payload (sent once, then held)."""
    if isinstance(prompt, bytes):
        return np.frombuffer(prompt, dtype=np.int64)
    if prompt is not None:
        chats[index] = prompt
    return chats[index]
