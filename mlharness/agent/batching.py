"""Dynamic batching on the agent: concurrent requests are merged into batches of at most ``max_batchsize``.

Requests come from gRPC handler threads, each blocking until its result is ready. A request larger than the
batch size is cut into chunks so that several workers can run them in parallel (an Offline query sent whole).
``workers`` threads take batches off the queue: a batch is formed when the queued samples fill it or when the
oldest queued sample has waited ``max_wait_s``. With ``max_wait_s == 0`` and an idle batcher, the handler thread
runs its request itself: no thread hand-off on the latency-critical SingleStream path.

``run(inputs) -> outputs`` takes one batch-first array per input and returns one batch-first sequence per output
(an array, or a list with one item per sample); results are split back per request along the first axis.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mlharness.errors import AgentError

log = logging.getLogger(__name__)

RunFn = Callable[[list[np.ndarray]], list[Sequence[Any]]]


class _Item:
    __slots__ = ("inputs", "n", "t0", "done", "result", "error", "ran")

    def __init__(self, inputs: list[np.ndarray], n: int):
        self.inputs = inputs
        self.n = n
        self.t0 = time.perf_counter()
        self.done = threading.Event()
        self.result: list[Sequence[Any]] | None = None
        self.error: BaseException | None = None
        self.ran: tuple[int, int, int, list[Any]] | None = None  # the batch's run: start, end (ns), samples, stages


def _concat(parts: list[Sequence[Any]]) -> Sequence[Any]:
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    merged: list[Any] = []
    for p in parts:
        merged.extend(p)
    return merged


class Batcher:
    def __init__(self, run: RunFn, max_batchsize: int = 1, max_wait_s: float = 0.0, workers: int = 1,
                 stages: Callable[[], list[Any]] | None = None):
        if max_batchsize < 1:
            raise AgentError(f"max batch size must be >= 1, got {max_batchsize}")
        self._run = run
        self._stages = stages  # called on the running thread after each batch: its stage spans (a trace)
        self.max_batchsize = max_batchsize
        self.max_wait_s = max(0.0, max_wait_s)
        self._cond = threading.Condition()
        self._pending: deque[_Item] = deque()
        self._pending_n = 0
        self._free = max(1, workers)  # batches that may run at once (worker threads and inline callers)
        self._closed = False
        self.batches = 0
        self.samples = 0
        self.largest = 0
        self._threads = [threading.Thread(target=self._worker, name=f"mlharness-agent-batch-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    # -- callers -----------------------------------------------------------------------------------------------
    def submit(self, inputs: list[np.ndarray], timings: list[Any] | None = None) -> list[Sequence[Any]]:
        """Run one request (any number of samples); blocks until its outputs are ready. ``timings`` gets, per
        batch that ran the request's samples, (start ns, end ns, samples in the batch, stage spans)."""
        n = len(inputs[0]) if inputs else 0
        if n == 0:
            raise AgentError("a request needs at least one sample", "INVALID_ARGUMENT")
        mb = self.max_batchsize
        with self._cond:
            if self._closed:
                raise AgentError("the agent is shutting down", "UNAVAILABLE")
            inline = self.max_wait_s == 0 and n <= mb and not self._pending and self._free > 0
            if inline:
                self._free -= 1
            else:
                items = [_Item([a[s:s + mb] for a in inputs], min(mb, n - s)) for s in range(0, n, mb)]
                self._pending.extend(items)
                self._pending_n += n
                self._cond.notify_all()
        if inline:
            try:
                t0 = time.perf_counter_ns()
                outputs = self._run(inputs)
                ran = (t0, time.perf_counter_ns(), n, self._stages() if self._stages else [])
                if timings is not None:
                    timings.append(ran)
                self._count(n)
                return outputs
            finally:
                with self._cond:
                    self._free += 1
                    self._cond.notify_all()
        for item in items:
            item.done.wait()
            if item.error is not None:
                raise item.error
            if timings is not None and item.ran is not None:
                timings.append(item.ran)
        if len(items) == 1:
            return items[0].result  # type: ignore[return-value]
        return [_concat([it.result[k] for it in items]) for k in range(len(items[0].result))]  # type: ignore[index]

    def close(self, timeout: float = 30.0) -> None:
        """Refuse new requests, finish the queued ones, stop the workers."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)

    # -- workers -----------------------------------------------------------------------------------------------
    def _ready(self, now: float) -> bool:
        return self._pending_n >= self.max_batchsize or now >= self._pending[0].t0 + self.max_wait_s or self._closed

    def _take(self) -> list[_Item]:
        batch = [self._pending.popleft()]
        n = batch[0].n
        while self._pending and n + self._pending[0].n <= self.max_batchsize:
            item = self._pending.popleft()
            batch.append(item)
            n += item.n
        self._pending_n -= n
        return batch

    def _worker(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._pending and self._free > 0:
                        now = time.perf_counter()
                        if self._ready(now):
                            break
                        self._cond.wait(self._pending[0].t0 + self.max_wait_s - now)
                    elif self._closed and not self._pending:
                        return
                    else:
                        self._cond.wait()
                batch = self._take()
                self._free -= 1
            try:
                self._execute(batch)
            finally:
                with self._cond:
                    self._free += 1
                    self._cond.notify_all()

    def _execute(self, batch: list[_Item]) -> None:
        try:
            if len(batch) == 1:
                inputs = batch[0].inputs
            else:
                inputs = [np.concatenate([it.inputs[k] for it in batch]) for k in range(len(batch[0].inputs))]
            t0 = time.perf_counter_ns()
            outputs = self._run(inputs)
            total = sum(it.n for it in batch)
            ran = (t0, time.perf_counter_ns(), total, self._stages() if self._stages else [])
            for k, out in enumerate(outputs):
                if len(out) != total:
                    raise AgentError(f"output {k} has {len(out)} rows for a batch of {total} samples", "INTERNAL")
            start = 0
            for it in batch:
                it.ran = ran
                it.result = [out[start:start + it.n] for out in outputs] if len(batch) > 1 else outputs
                start += it.n
            self._count(total)
        except BaseException as e:  # noqa: BLE001 - every waiting request must be released with the error
            for it in batch:
                it.error = e
        finally:
            for it in batch:
                it.done.set()

    def _count(self, n: int) -> None:
        with self._cond:
            self.batches += 1
            self.samples += n
            self.largest = max(self.largest, n)
