"""The threaded SUT as a pipeline of stages, so that batching, inference and completion overlap.

::

    LoadGen issue thread ─▶ queue ─▶ feeder ─▶ hand-off ─▶ runner × R ─▶ queue ─▶ completer ─▶ QuerySamplesComplete
                                     (batches,               (predict on          (postprocess, encode,
                                      gathers ahead)          its instance)        completes in bulk)

- The **feeder** turns queries into batches. Offline/SingleStream/MultiStream: a query is cut into batches of at
  most ``max_batchsize`` that never span queries, and each batch's inputs are gathered ahead, while the runners
  infer; at most ``R`` gathered batches wait, so a huge Offline query is not copied into memory at once.
  Server: arrivals top up the open batch until it is full; it is taken when a runner is free and its first
  sample has waited ``coalesce_wait_s`` (at once when LoadGen has flushed): greedy dynamic batching with no
  batch sealed early.
- A **runner** per instance (or more, ``workers``) takes the oldest batch, runs the model and passes the outputs
  on. Frameworks release the GIL while they compute, so the other stages run meanwhile.
- The **completer** runs postprocess and the encoding of every finished batch and completes all of them with
  one ``QuerySamplesComplete`` while their buffers are alive.

Every sample reaches the completer exactly once; after the first error no model runs and every batch is
completed with empty responses, so LoadGen always reaches its end.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from mlharness.loadgen.sut import Pipeline, SystemUnderTest

STOP = object()


class Batch:
    """Samples that run through the model together. ``parts`` grow while a Server batch is open."""

    __slots__ = ("id_parts", "idx_parts", "n", "inputs", "born", "sealed", "first_ns")

    def __init__(self, ids: np.ndarray, idx: np.ndarray, sealed: bool, first_ns: int = 0):
        self.id_parts = [ids]
        self.idx_parts = [idx]
        self.n = len(ids)
        self.inputs: list[np.ndarray] | None = None
        self.born = time.perf_counter()
        self.sealed = sealed
        self.first_ns = first_ns  # issue time of the first sample, recorded only when tracing

    def add(self, ids: np.ndarray, idx: np.ndarray) -> None:
        self.id_parts.append(ids)
        self.idx_parts.append(idx)
        self.n += len(ids)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if len(self.id_parts) == 1:
            return self.id_parts[0], self.idx_parts[0]
        return np.concatenate(self.id_parts), np.concatenate(self.idx_parts)


class Handoff:
    """The batches between the feeder and the runners, oldest first; only the newest may still be open."""

    def __init__(self, max_batchsize: int, coalesce_wait_s: float | None, ahead: int):
        self.cond = threading.Condition()
        self.batches: deque[Batch] = deque()
        self.mb = max_batchsize
        self.wait = coalesce_wait_s
        self.ahead = max(1, ahead)
        self.flushed = False
        self.stopped = False

    # -- feeder side -------------------------------------------------------------------------------------------
    def put_sealed(self, batch: Batch) -> None:
        """Publish a batch that is complete; blocks while ``ahead`` batches already wait (back-pressure)."""
        with self.cond:
            while len(self.batches) >= self.ahead and not self.stopped:
                self.cond.wait()
            self.batches.append(batch)
            self.cond.notify()

    def top_up(self, ids: np.ndarray, idx: np.ndarray, first_ns: int = 0) -> None:
        """Server: add arrivals to the open batch, opening new ones as batches fill."""
        start, n = 0, len(ids)
        with self.cond:
            while start < n:
                last = self.batches[-1] if self.batches else None
                if last is None or last.sealed:
                    take = min(self.mb, n - start)
                    last = Batch(ids[start:start + take], idx[start:start + take], False, first_ns)
                    self.batches.append(last)
                else:
                    take = min(self.mb - last.n, n - start)
                    last.add(ids[start:start + take], idx[start:start + take])
                start += take
                if last.n >= self.mb:
                    last.sealed = True
            self.cond.notify_all()

    def flush(self) -> None:
        with self.cond:
            self.flushed = True
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    # -- runner side -------------------------------------------------------------------------------------------
    def take(self) -> Batch | None:
        """The oldest batch once it may run; None when stopped and nothing is left."""
        with self.cond:
            while True:
                if self.batches:
                    b = self.batches[0]
                    if b.sealed or self.flushed or self.stopped or self.wait is None:
                        break
                    left = self.wait - (time.perf_counter() - b.born)
                    if left <= 0:
                        break
                    self.cond.wait(left)
                elif self.stopped:
                    return None
                else:
                    self.cond.wait()
            self.batches.popleft()
            b.sealed = True
            self.cond.notify_all()  # the feeder may be waiting for room
            return b


class StagedWorkers:
    """Feeder, runners and completer of one :class:`SystemUnderTest`; started and stopped with it."""

    def __init__(self, sut: SystemUnderTest, runners: int, affinity: list[set[int]] | None = None):
        self.sut = sut
        self.n_runners = max(1, runners)
        self.affinity = affinity
        strat = sut.strategy
        self.handoff = Handoff(strat.max_batchsize, strat.coalesce_wait_s, self.n_runners)
        self.server = strat.coalesce_wait_s is not None
        self.done: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        pipelines = self.sut.pipelines
        specs: list[tuple[Any, tuple[Any, ...], str]] = [(self._feeder, (), "mlharness-feeder")]
        for i in range(self.n_runners):
            cores = self.affinity[i % len(self.affinity)] if self.affinity else None
            specs.append((self._runner, (pipelines[i % len(pipelines)], cores), f"mlharness-runner-{i}"))
        specs.append((self._completer, (), "mlharness-completer"))
        for target, args, name in specs:
            t = threading.Thread(target=target, args=args, name=name, daemon=True)
            t.start()
            self.threads.append(t)

    def flush(self) -> None:
        self.handoff.flush()

    def stop(self) -> None:
        self.sut._queue.put(STOP)
        for t in self.threads:
            t.join(timeout=30)
        self.threads.clear()

    # -- feeder --------------------------------------------------------------------------------------------------
    def _feeder(self) -> None:
        sut, hand = self.sut, self.handoff
        mb = hand.mb
        get = sut._queue.get
        gather = sut.pipeline.store.gather
        tracer = sut.tracer
        try:
            while True:
                item = get()
                if item is STOP:
                    return
                try:
                    ids, idx, first_ns = sut.unpack(item)
                except BaseException as e:  # noqa: BLE001 - a malformed query must not stall the others
                    sut._fail(e)
                    continue
                if self.server:
                    hand.top_up(ids, idx, first_ns)
                    continue
                for start in range(0, len(ids), mb):
                    batch = Batch(ids[start:start + mb], idx[start:start + mb], True, first_ns)
                    if sut.error is None:
                        t0 = tracer.now() if tracer is not None else 0
                        try:
                            batch.inputs = gather(batch.idx_parts[0])
                        except BaseException as e:  # noqa: BLE001 - the runner completes it empty
                            sut._fail(e)
                        if tracer is not None:
                            tracer.span("gather", "model", t0, tracer.now(), {"samples": batch.n})
                    hand.put_sealed(batch)
        finally:
            hand.stop()

    # -- runners -------------------------------------------------------------------------------------------------
    def _runner(self, pipeline: Pipeline, cores: set[int] | None) -> None:
        if cores:
            os.sched_setaffinity(0, cores)  # this thread only (Linux)
        sut, take, done = self.sut, self.handoff.take, self.done.put
        tracer = sut.tracer
        while True:
            batch = take()
            if batch is None:
                done(STOP)
                return
            if sut.error is not None:
                done((batch, None, None))
                continue
            try:
                if tracer is not None:
                    done((batch, pipeline, self._infer_traced(pipeline, batch)))
                    continue
                inputs = batch.inputs
                if inputs is None:
                    inputs = pipeline.store.gather(batch.arrays()[1])
                batch.inputs = None  # the inputs are not needed past predict: free them now
                done((batch, pipeline, pipeline.infer(inputs)))
            except BaseException as e:  # noqa: BLE001 - every failure must still complete the samples
                sut._fail(e)
                done((batch, None, None))

    def _infer_traced(self, pipeline: Pipeline, batch: Batch) -> Any:
        tracer = self.sut.tracer
        t0 = tracer.now()
        ids, idx = batch.arrays()
        if batch.first_ns:
            tracer.span("queue_wait", "model", batch.first_ns, t0, {"samples": batch.n})
        inputs = batch.inputs
        if inputs is None:
            inputs = pipeline.store.gather(idx)
            tracer.span("gather", "model", t0, tracer.now(), {"samples": batch.n})
        batch.inputs = None
        t1 = tracer.now()
        try:
            return pipeline.infer(inputs)
        finally:
            end = tracer.now()
            tracer.span("predict", "model", t1, end, {"samples": batch.n})
            tracer.span("batch", "model", t0, end, {"sample_ids": ids.tolist(), "sample_indices": idx.tolist()})

    # -- completer -----------------------------------------------------------------------------------------------
    def _completer(self) -> None:
        sut, get, get_nowait = self.sut, self.done.get, self.done.get_nowait
        tracer = sut.tracer
        stops = 0
        while stops < self.n_runners:
            items = [get()]
            while True:  # everything finished meanwhile goes out in the same call
                try:
                    items.append(get_nowait())
                except queue.Empty:
                    break
            parts = []
            for item in items:
                if item is STOP:
                    stops += 1
                    continue
                batch, pipeline, outputs = item
                ids = batch.arrays()[0].tolist()
                if pipeline is not None and sut.error is None:
                    t0 = tracer.now() if tracer is not None else 0
                    try:
                        buf, offsets = pipeline.respond(outputs, batch.n)
                        parts.append((ids, buf, offsets))
                        if tracer is not None:
                            tracer.span("postprocess", "model", t0, tracer.now(), {"samples": batch.n})
                        continue
                    except BaseException as e:  # noqa: BLE001 - completed empty below
                        sut._fail(e)
                parts.append((ids, None, None))
            if parts:
                t0 = tracer.now() if tracer is not None else 0
                sut._complete_parts(parts)
                if tracer is not None:
                    tracer.span("complete", "model", t0, tracer.now(),
                                {"samples": sum(len(p[0]) for p in parts), "batches": len(parts)})
