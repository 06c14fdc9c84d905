"""The threaded SUT as a pipeline of stages, so that batching, inference and completion overlap.

::

    LoadGen issue thread ─▶ queue ─▶ feeder ─▶ hand-off ─▶ runner × R ─▶ queue ─▶ completer ─▶ QuerySamplesComplete
                                     (batches,               (predict on          (postprocess, encode,
                                      gathers ahead)          its instance)        completes in bulk)
    Server:  LoadGen issue thread ─────────────▶ ServerQueue ─▶ runner × R ─▶ ...

- The **feeder** turns queries into batches. Offline/SingleStream/MultiStream: a query is cut into batches of at
  most ``max_batchsize`` that never span queries, and each batch's inputs are gathered ahead while the runners
  infer (when the model computes off this CPU and a batch holds enough bytes to be worth it); at most a few
  gathered batches per runner wait, so a huge Offline query is not copied into memory at once.
  Server: LoadGen's issue thread puts arrivals straight into a
  :class:`~mlharness.loadgen.server_queue.ServerQueue` (no feeder: one thread wake-up less); a free runner takes
  as many of them as the model's measured batch times say (one sample on a CPU where a batch costs its size, the
  whole queue where batches are nearly free), waiting up to ``coalesce_wait_s`` for arrivals only where a larger
  batch would be taken.
- A **runner** per instance (or more, ``workers``) takes the oldest batch, runs the model and passes the outputs
  on. Frameworks release the GIL while they compute, so the other stages run meanwhile.
- The **completer** runs postprocess and the encoding of every finished batch and completes all of them with
  one ``QuerySamplesComplete`` while their buffers are alive. A batch whose predict took under a millisecond
  is completed by its runner instead: for such a model the hand-off would cost more than it hides. So is a
  Server batch when no sample waits: the hand-off would hide nothing and only delay the completion.

Every sample reaches the completer exactly once; after the first error, or once a signal drained the SUT, no
model runs and every batch is completed with empty responses, so LoadGen always reaches its end (an Offline
query stops between two batches).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from typing import Any, Protocol

import numpy as np

from mlharness.loadgen.batch import Pipeline, Strategy
from mlharness.loadgen.server_queue import ServerQueue

STOP = object()
GATHER_AHEAD_BYTES = 256 * 1024  # smaller batches are gathered by the runner itself
# A batch whose predict took less than this is completed by its runner: handing it to the completer costs
# thread wake-ups (tens of microseconds) and hides only postprocess time, which such a model barely has.
HANDOFF_MIN_S = 0.001


class ServedSut(Protocol):
    """What the stages need of the SUT they serve (:class:`mlharness.loadgen.sut.SystemUnderTest`): its queue of
    issued queries, how to batch, the instances' pipelines, and the completion contract."""

    queries: queue.SimpleQueue
    strategy: Strategy
    pipeline: Pipeline
    pipelines: list[Pipeline]
    tracer: Any
    halted: bool
    complete_parts: Any  # Completions.complete_parts
    fail: Any  # Completions.fail

    def unpack(self, item: Any) -> tuple[np.ndarray, np.ndarray, int]: ...


class Batch:
    """Samples that run through the model together (a Server batch is cut from several queries' parts)."""

    __slots__ = ("id_parts", "idx_parts", "n", "inputs", "first_ns")

    def __init__(self, ids: np.ndarray, idx: np.ndarray, first_ns: int = 0):
        self.id_parts = [ids]
        self.idx_parts = [idx]
        self.n = len(ids)
        self.inputs: list[np.ndarray] | None = None
        self.first_ns = first_ns  # issue time of the first sample, recorded only when tracing

    def add(self, ids: np.ndarray, idx: np.ndarray) -> None:
        self.id_parts.append(ids)
        self.idx_parts.append(idx)
        self.n += len(ids)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, indices); the parts are joined once, on the first call, which comes after the batch was taken
        (nothing is added to it any more)."""
        if len(self.id_parts) > 1:
            self.id_parts = [np.concatenate(self.id_parts)]
            self.idx_parts = [np.concatenate(self.idx_parts)]
        return self.id_parts[0], self.idx_parts[0]


class Handoff:
    """The batches between the feeder and the runners, oldest first (Offline, SingleStream, MultiStream; the
    Server's queue is :class:`~mlharness.loadgen.server_queue.ServerQueue`).

    Back-pressure has hysteresis: a feeder that finds ``high`` batches waiting sleeps until only ``low`` are
    left, so it wakes once per several batches rather than once per batch (each thread wake-up costs tens of
    microseconds, which a tiny model notices)."""

    def __init__(self, max_batchsize: int, runners: int):
        lock = threading.Lock()
        self.ready = threading.Condition(lock)  # runners wait here for a batch
        self.room = threading.Condition(lock)  # the feeder waits here for room
        self.batches: deque[Batch] = deque()
        self.mb = max_batchsize
        self.high = 4 * max(1, runners)
        self.low = 2 * max(1, runners)
        self.stopped = False

    # -- feeder side -------------------------------------------------------------------------------------------
    def put(self, batch: Batch, bounded: bool = True) -> None:
        """Publish a complete batch; when ``bounded`` (its inputs are gathered) blocks while ``high`` batches
        wait, until ``low`` are left."""
        with self.ready:
            if bounded and len(self.batches) >= self.high:
                while len(self.batches) > self.low and not self.stopped:
                    self.room.wait()
            self.batches.append(batch)
            self.ready.notify()

    def flush(self) -> None:
        """Nothing waits for more arrivals outside Server: a flush changes nothing."""

    def stop(self) -> None:
        with self.ready:
            self.stopped = True
            self.ready.notify_all()
            self.room.notify_all()

    # -- runner side -------------------------------------------------------------------------------------------
    def take(self) -> Batch | None:
        """The oldest batch once it may run; None when stopped and nothing is left."""
        with self.ready:
            while True:
                if self.batches:
                    break
                if self.stopped:
                    return None
                else:
                    self.ready.wait()
            b = self.batches.popleft()
            if len(self.batches) == self.low:
                self.room.notify()
            return b


class StagedWorkers:
    """Feeder, runners and completer of one SUT (:class:`~mlharness.loadgen.sut.SystemUnderTest`); started and
    stopped with it."""

    def __init__(self, sut: ServedSut, runners: int, affinity: list[set[int]] | None = None):
        self.sut = sut
        self.n_runners = max(1, runners)
        self.affinity = affinity
        strat = sut.strategy
        self.server = strat.server
        self.handoff: Handoff | ServerQueue = (
            ServerQueue(strat.max_batchsize, strat.coalesce_wait_s, self.n_runners, Batch) if self.server
            else Handoff(strat.max_batchsize, self.n_runners))
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
        self.sut.queries.put(STOP)
        for t in self.threads:
            t.join(timeout=30)
        self.threads.clear()

    # -- feeder --------------------------------------------------------------------------------------------------
    def _feeder(self) -> None:
        sut, hand = self.sut, self.handoff
        mb = hand.mb
        get = sut.queries.get
        gather = sut.pipeline.store.gather
        tracer = sut.tracer
        ahead: bool | None = None  # decided at the first query, once the samples are loaded
        try:
            while True:
                item = get()
                if item is STOP:
                    return
                try:
                    ids, idx, first_ns = sut.unpack(item)
                except BaseException as e:  # noqa: BLE001 - a malformed query must not stall the others
                    sut.fail(e)
                    continue
                if self.server:
                    hand.top_up(ids, idx, first_ns)
                    continue
                if ahead is None:
                    ahead = self._gathers_ahead()
                for start in range(0, len(ids), mb):
                    batch = Batch(ids[start:start + mb], idx[start:start + mb], first_ns)
                    if ahead and not sut.halted:
                        t0 = tracer.now() if tracer is not None else 0
                        try:
                            batch.inputs = gather(batch.idx_parts[0])
                        except BaseException as e:  # noqa: BLE001 - the runner completes it empty
                            sut.fail(e)
                        if tracer is not None:
                            tracer.span("gather", "model", t0, tracer.now(), {"samples": batch.n})
                    hand.put(batch, bounded=ahead)
        finally:
            hand.stop()

    def _gathers_ahead(self) -> bool:
        """Gather ahead only when it hides work: the model computes off this CPU (on a CPU the copy competes
        with the framework's threads: -3% on a 2-core ResNet50), and the batch is worth a copy (for a few
        kilobytes the extra hand-offs between threads cost more than the gather they would hide)."""
        if not all(p.predictor.computes_off_host() for p in self.sut.pipelines):
            return False
        per_sample = self.sut.pipeline.store.sample_nbytes()
        return per_sample is None or per_sample * self.handoff.mb >= GATHER_AHEAD_BYTES

    # -- runners -------------------------------------------------------------------------------------------------
    def _runner(self, pipeline: Pipeline, cores: set[int] | None) -> None:
        if cores:
            os.sched_setaffinity(0, cores)  # this thread only (Linux)
        sut, take, done = self.sut, self.handoff.take, self.done.put
        tracer = sut.tracer
        clock = time.perf_counter
        while True:
            batch = take()
            if batch is None:
                done(STOP)
                return
            if sut.halted:
                done((batch, None, None))
                continue
            if tracer is not None:
                self._run_traced(pipeline, batch)
                continue
            try:
                inputs = batch.inputs
                if inputs is None:
                    inputs = pipeline.store.gather(batch.arrays()[1])
                batch.inputs = None  # the inputs are not needed past predict: free them now
                t0 = clock()
                outputs = pipeline.infer(inputs)
            except BaseException as e:  # noqa: BLE001 - every failure must still complete the samples
                sut.fail(e)
                done((batch, None, None))
                continue
            if clock() - t0 >= HANDOFF_MIN_S and not self._nothing_waits():
                done((batch, pipeline, outputs))
            else:
                sut.complete_parts([self._part(batch, pipeline, outputs)])

    def _nothing_waits(self) -> bool:
        """Server with an empty queue: the runner completes its batch itself, since no waiting sample would
        start sooner for the hand-off to the completer, and the hand-off's thread wake-up would add to the
        latency of every sample that arrives at an idle SUT (read without the lock: a stale answer only picks
        the other, equally correct, path)."""
        return self.server and not self.handoff.waiting

    def _run_traced(self, pipeline: Pipeline, batch: Batch) -> None:
        """The runner's work on one batch with spans: queue_wait, gather (unless gathered ahead), predict, and
        when the batch is completed here, postprocess and complete; ``batch`` spans all of it."""
        tracer = self.sut.tracer
        t0 = tracer.now()
        ids, idx = batch.arrays()
        if batch.first_ns:
            tracer.span("queue_wait", "model", batch.first_ns, t0, {"samples": batch.n})
        try:
            inputs = batch.inputs
            if inputs is None:
                inputs = pipeline.store.gather(idx)
                tracer.span("gather", "model", t0, tracer.now(), {"samples": batch.n})
            batch.inputs = None
            t1 = tracer.now()
            try:
                outputs = pipeline.infer(inputs)
            finally:
                t2 = tracer.now()
                tracer.span("predict", "model", t1, t2, {"samples": batch.n})
        except BaseException as e:  # noqa: BLE001 - every failure must still complete the samples
            self.sut.fail(e)
            self.done.put((batch, None, None))
            outputs, t2 = None, tracer.now()
        else:
            if (t2 - t1) / 1e9 >= HANDOFF_MIN_S and not self._nothing_waits():
                self.done.put((batch, pipeline, outputs))
            else:
                self._complete_traced([self._part(batch, pipeline, outputs)])
        tracer.span("batch", "model", t0, tracer.now(), {"sample_ids": ids.tolist(), "sample_indices": idx.tolist()})

    # -- completion ----------------------------------------------------------------------------------------------
    def _part(self, batch: Batch, pipeline: Pipeline | None, outputs: Any) -> tuple[list[int], Any, Any]:
        """postprocess + encoding of one batch: (ids, buffer, offsets), or no buffer after a failure."""
        sut = self.sut
        ids_a, idx_a = batch.arrays()
        ids = ids_a.tolist()
        if pipeline is not None and not sut.halted:
            tracer = sut.tracer
            t0 = tracer.now() if tracer is not None else 0
            try:
                buf, offsets = pipeline.respond(outputs, batch.n, idx_a)
            except BaseException as e:  # noqa: BLE001 - completed empty below
                sut.fail(e)
            else:
                if tracer is not None:
                    tracer.span("postprocess", "model", t0, tracer.now(), {"samples": batch.n})
                return ids, buf, offsets
        return ids, None, None

    def _complete_traced(self, parts: list[tuple[list[int], Any, Any]]) -> None:
        tracer = self.sut.tracer
        t0 = tracer.now()
        self.sut.complete_parts(parts)
        tracer.span("complete", "model", t0, tracer.now(),
                    {"samples": sum(len(p[0]) for p in parts), "batches": len(parts)})

    def _completer(self) -> None:
        sut, get, get_nowait = self.sut, self.done.get, self.done.get_nowait
        complete = sut.complete_parts if sut.tracer is None else self._complete_traced
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
                else:
                    parts.append(self._part(*item))
            if parts:
                complete(parts)
