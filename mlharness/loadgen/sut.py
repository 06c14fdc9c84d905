"""The system under test, and the only module that touches LoadGen's SUT/QSL handles.

``issue_cb`` only enqueues the query and returns (it runs on LoadGen's issue thread; any work there would
distort the Server schedule). Staged worker threads (:mod:`mlharness.loadgen.stages`) form batches as the
scenario's strategy says, run predict on each instance, then postprocess, encode each response in the declared
dtype and complete finished batches in bulk while their buffers are alive. SingleStream/MultiStream with one
instance run inline on LoadGen's thread instead (nothing to overlap: LoadGen waits for each query).

Every issued sample is completed exactly once. When anything in the timed path raises, the SUT records the
first error, completes the failing batch with empty responses, and from then on completes every sample at
once without running the model, so LoadGen reaches its end; the runner then fails the run loudly. A signal
(SIGINT, SIGTERM) drains the SUT the same way (:meth:`Completions.drain`, :mod:`mlharness.loadgen.interrupt`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mlharness.errors import RunFailed
from mlharness.loadgen.batch import Pipeline, Strategy
from mlharness.loadgen.completion import Completions
from mlharness.loadgen.qsl import SampleLoader
from mlharness.loadgen.server_queue import measure_batch_times
from mlharness.loadgen.stages import StagedWorkers

log = logging.getLogger(__name__)


class _Fresh:
    """A query as LoadGen's fast issue callback hands it over: plain lists of ids and sample indices.
    Converting them to arrays is left to the worker so that ``issue_cb`` does nothing but enqueue."""

    __slots__ = ("ids", "indices", "t_ns")

    def __init__(self, ids: list[int], indices: list[int], t_ns: int = 0):
        self.ids = ids
        self.indices = indices
        self.t_ns = t_ns  # issue time, recorded only when tracing


class SystemUnderTest(Completions):
    """LoadGen's callbacks and the threads behind them. Use :meth:`run_test` to run one LoadGen test.

    SingleStream/MultiStream with one instance run inline on LoadGen's issue thread; everything else goes
    through the staged workers of :mod:`mlharness.loadgen.stages` (feeder, one runner per instance or worker,
    completer)."""

    def __init__(self, pipeline: Pipeline | list[Pipeline], strategy: Strategy, workers: int = 1,
                 on_failure: Callable[[BaseException], None] | None = None, tracer: Any = None,
                 affinity: list[set[int]] | None = None):
        super().__init__(on_failure)
        self.tracer = tracer
        # one pipeline per predictor instance; runner i drives instance i % len(pipelines)
        self.pipelines = list(pipeline) if isinstance(pipeline, list | tuple) else [pipeline]
        self.pipeline = self.pipelines[0]
        self.strategy = strategy
        self.n_workers = max(1, workers, len(self.pipelines))
        self.affinity = affinity  # cores of each runner (core pinning), or None
        # one query at a time by construction, one pipeline: process on LoadGen's thread (see issue_inline)
        self.inline = strategy.one_query_at_a_time and self.n_workers == 1
        self.queries: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stages: StagedWorkers | None = None
        self.server_batching: dict[str, Any] | None = None  # Server: the measured batch times and the policy

    # -- LoadGen callbacks ---------------------------------------------------------------------------------
    def issue(self, query_samples: Any) -> None:
        self.queries.put(query_samples)

    def issue_fast(self, ids: list[int], indices: list[int]) -> None:
        self.queries.put(_Fresh(ids, indices))

    def issue_fast_traced(self, ids: list[int], indices: list[int]) -> None:
        self.queries.put(_Fresh(ids, indices, self._issue_mark(len(ids))))

    def _issue_mark(self, n: int) -> int:
        """A zero-length ``issue`` span for every arrival (a trace's schedule, for replays); its time in ns."""
        t_ns = time.perf_counter_ns()
        self.tracer.span("issue", "model", t_ns, t_ns, {"samples": n})
        return t_ns

    def issue_server(self, ids: list[int], indices: list[int]) -> None:
        """Server: an arrival goes from LoadGen's issue thread straight into the runners' queue, so an idle
        runner starts it after one thread wake-up rather than two (through the feeder)."""
        self._arrive(ids, indices, 0)

    def issue_server_traced(self, ids: list[int], indices: list[int]) -> None:
        self._arrive(ids, indices, self._issue_mark(len(ids)))

    def _arrive(self, ids: list[int], indices: list[int], t_ns: int) -> None:
        self._count_issued(len(ids))
        try:
            self._stages.handoff.top_up(np.asarray(ids, dtype=np.uint64), np.asarray(indices, dtype=np.int64), t_ns)
        except BaseException as e:  # noqa: BLE001 - LoadGen cannot see Python exceptions; the samples must end
            self.fail(e)
            self._complete_empty([int(i) for i in ids])

    def issue_inline(self, ids: list[int], indices: list[int]) -> None:
        """SingleStream/MultiStream with one worker: LoadGen issues the next query only after this one has
        completed, so running it here, on LoadGen's issue thread, delays nothing; it saves the two thread
        wake-ups (to a worker and back to LoadGen) that cost tens of microseconds per query on an idle CPU."""
        ids_a = np.asarray(ids, dtype=np.uint64)
        idx_a = np.asarray(indices, dtype=np.int64)
        self._count_issued(len(ids_a))
        mb = self.strategy.max_batchsize
        for start in range(0, len(ids_a), mb):
            self._process(ids_a[start:start + mb], idx_a[start:start + mb], self.pipeline)

    def flush(self) -> None:
        if self._stages is not None:
            self._stages.flush()

    # -- workers -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        import mlperf_loadgen as lg

        self._lg = lg
        # started even when queries run inline: idle threads cost nothing, and the queue then always drains
        self._stages = StagedWorkers(self, self.n_workers, self.affinity)
        self._stages.start()

    def stop(self) -> None:
        if self._stages is not None:
            self._stages.stop()
            self._stages = None

    def unpack(self, item: Any) -> tuple[np.ndarray, np.ndarray, int]:
        """A queued query as (ids, indices, issue time when traced), counted as issued."""
        if isinstance(item, _Fresh):
            ids = np.asarray(item.ids, dtype=np.uint64)
            idx = np.asarray(item.indices, dtype=np.int64)
            t_ns = item.t_ns
        else:  # QuerySample objects (the plain SUT callback)
            n = len(item)
            ids = np.fromiter((s.id for s in item), dtype=np.uint64, count=n)
            idx = np.fromiter((s.index for s in item), dtype=np.int64, count=n)
            t_ns = 0
        self._count_issued(len(ids))
        return ids, idx, t_ns

    def _process(self, ids: np.ndarray, idx: np.ndarray, pipeline: Pipeline | None = None) -> None:
        """One batch start to end on the calling thread (the inline path)."""
        pipeline = pipeline or self.pipeline
        tracer = self.tracer
        t_batch = tracer.now() if tracer is not None else 0
        if not self.halted:
            try:
                buf, offsets = pipeline.run(idx)
                t_complete = tracer.now() if tracer is not None else 0
                self._complete(ids.tolist(), buf, offsets)
                if tracer is not None:
                    end = tracer.now()
                    tracer.span("complete", "model", t_complete, end, {"samples": len(ids)})
                    tracer.span("batch", "model", t_batch, end,
                                {"sample_ids": ids.tolist(), "sample_indices": idx.tolist()})
                return
            except BaseException as e:  # noqa: BLE001 - every failure must still complete the samples
                self.fail(e)
        self._complete_empty(ids.tolist())

    def _measure_batches(self, indices: list[int]) -> None:
        """Server with batches: time the model at each batch size on loaded samples (untimed by LoadGen), so
        that free runners take as many waiting samples as pays (:mod:`mlharness.loadgen.server_queue`)."""
        pipeline = self.pipeline
        try:
            times = measure_batch_times(lambda idx: pipeline.infer(pipeline.store.gather(idx)), indices,
                                        self.strategy.max_batchsize)
        except Exception as e:  # noqa: BLE001 - greedy batching still works; the run itself will report the model
            log.warning("could not time the model's Server batch sizes (%s); batching greedily", e)
            return
        server_queue = self._stages.handoff  # a ServerQueue: the strategy is the Server's
        server_queue.set_batch_times(times)
        self.server_batching = server_queue.policy.describe()

    # -- one LoadGen test ----------------------------------------------------------------------------------
    def run_test(self, loader: SampleLoader, total_count: int, performance_count: int, settings: Any,
                 log_settings: Any, audit_config: str, warmup: int = 0) -> None:
        def warm(indices: list[int]) -> None:
            # LoadGen loads samples before it starts the clock: warm the model up on real data here
            first = np.asarray(indices[: self.strategy.max_batchsize], dtype=np.int64)
            if warmup > 0:
                for pipeline in self.pipelines:
                    pipeline.warmup(first, warmup)
            if self.strategy.server_batches:
                self._measure_batches(indices)

        # the fast SUT hands issue_cb lists of ids and indices instead of QuerySample objects
        traced = self.tracer is not None
        if self.inline:
            issue = self.issue_inline
        elif self.strategy.server:
            issue = self.issue_server_traced if traced else self.issue_server
        else:
            issue = self.issue_fast_traced if traced else self.issue_fast
        self.start()
        run_fast_sut(self, loader, total_count, performance_count, settings, log_settings, audit_config, issue,
                     self.flush, warm if warmup > 0 or self.strategy.server_batches else None, on_end=self.stop)
        self._raise_if_failed()


class NetworkQDL(Completions):
    """LoadGen over the network: LoadGen's query dispatch library (QDL) on this node, the SUT on agents.

    The QDL does no pre-processing, batching or post-processing: ``issue`` forwards each query's sample indices
    to agents that run the whole timed path (``mlharness agent serve --hooks agent``) and completes the samples
    with the bytes the agents return. A large query (Offline) travels as several messages of at most
    ``client.max_samples`` indices, spread over the agents, which batch as they like. The QSL's load/unload are
    forwarded to the agents (untimed), which pre-process and warm up there.

    ``client`` is the remote predictor in ``sample_index`` mode: ``submit(indices, done)``,
    ``qsl(action, indices)``, ``sut_name()`` and ``max_samples``. Same completion contract as
    :class:`SystemUnderTest`: every sample is completed exactly once, with empty responses after a failure.
    """

    failure_label = "the network SUT"

    def __init__(self, client: Any, on_failure: Callable[[BaseException], None] | None = None):
        super().__init__(on_failure)
        self.client = client
        self.chunk = max(1, int(getattr(client, "max_samples", 1024)))
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0

    # -- LoadGen callbacks -------------------------------------------------------------------------------------
    def issue(self, query_samples: Any) -> None:
        ids = [s.id for s in query_samples]
        indices = [s.index for s in query_samples]
        self._count_issued(len(ids))
        for start in range(0, len(ids), self.chunk):
            self._send(ids[start:start + self.chunk], indices[start:start + self.chunk])

    def flush(self) -> None:
        pass

    def name(self) -> str:
        try:
            return self.client.sut_name()
        except Exception as e:  # noqa: BLE001 - LoadGen cannot see Python exceptions
            log.warning("cannot name the network SUT: %s", e)
            return "mlharness Network SUT"

    # -- requests ----------------------------------------------------------------------------------------------
    def _send(self, ids: list[int], indices: list[int]) -> None:
        if self.halted:
            self._complete_empty(ids)
            return
        with self._lock:
            self._in_flight += 1
        try:
            self.client.submit(indices, lambda responses, err: self._done(ids, responses, err))
        except BaseException as e:  # noqa: BLE001 - the samples must still complete
            self._done(ids, None, e)

    def _done(self, ids: list[int], responses: list[bytes] | None, error: BaseException | None) -> None:
        try:
            if error is None and responses is not None and len(responses) != len(ids):
                error = RunFailed(f"an agent answered {len(responses)} responses for {len(ids)} samples")
            if error is not None:
                self.fail(error)
            if responses is None or self.halted:
                self._complete_empty(ids)
            else:
                sizes = np.fromiter((len(r) for r in responses), dtype=np.int64, count=len(responses))
                offsets = np.zeros(len(responses) + 1, dtype=np.int64)
                np.cumsum(sizes, out=offsets[1:])
                self._complete(ids, np.frombuffer(b"".join(responses) or b"\0", dtype=np.uint8), offsets)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._idle.notify_all()

    # -- one LoadGen test ----------------------------------------------------------------------------------
    def run_test(self, loader: SampleLoader, total_count: int, performance_count: int, settings: Any,
                 log_settings: Any, audit_config: str, warmup: int = 0) -> None:
        """Same shape as :meth:`SystemUnderTest.run_test`; ``loader`` and ``warmup`` are the agents' business."""
        import mlperf_loadgen as lg

        self._lg = lg

        def load(indices: list[int]) -> None:
            try:
                self.client.qsl("load", list(indices))
            except BaseException as e:  # noqa: BLE001 - LoadGen cannot see Python exceptions
                self.fail(e)

        def unload(indices: list[int]) -> None:
            try:
                self.client.qsl("unload", list(indices))
            except BaseException as e:  # noqa: BLE001
                log.warning("the agents could not unload samples: %s", e)

        qsl = lg.ConstructQSL(total_count, performance_count, load, unload)
        qdl = lg.ConstructQDL(self.issue, self.flush, self.name)
        try:
            self._start_test(lambda: lg.StartTestWithLogSettings(qdl, qsl, settings, log_settings, audit_config))
        finally:
            with self._lock:  # LoadGen waits for every sample, so this is only a safety net
                self._idle.wait_for(lambda: self._in_flight == 0, timeout=30)
            lg.DestroyQDL(qdl)
            lg.DestroyQSL(qsl)
        self._raise_if_failed()


def run_fast_sut(target: Completions, loader: SampleLoader, total_count: int, performance_count: int, settings: Any,
                 log_settings: Any, audit_config: str, issue: Callable[[list[int], list[int]], None],
                 flush: Callable[[], None], on_loaded: Callable[[list[int]], None] | None = None,
                 on_end: Callable[[], None] | None = None) -> None:
    """One LoadGen test with a fast SUT whose callbacks are ``issue``/``flush`` (the token SUT of
    :mod:`mlharness.kinds.tokens.sut`); the QSL runs ``loader``, then ``on_loaded`` (warm-up) on the first load.
    Failures are recorded on ``target``, which completes what LoadGen issues afterwards. ``on_end`` runs once the
    test has ended (or failed to start), before LoadGen's handles are destroyed: a SUT stops its workers there."""
    import mlperf_loadgen as lg

    first = [True]

    def load(indices: list[int]) -> None:
        if target.halted:
            return
        try:
            loader.load(indices)
            if first[0] and indices and on_loaded is not None:
                first[0] = False
                on_loaded(list(indices))
        except BaseException as e:  # noqa: BLE001 - LoadGen cannot see Python exceptions
            loader.error = loader.error or e
            target.fail(e)

    def unload(indices: list[int]) -> None:
        try:
            loader.unload(indices)
        except BaseException as e:  # noqa: BLE001 - a failing unload hook fails the run (exit 3), never silently
            loader.error = loader.error or e
            target.fail(e)

    qsl = lg.ConstructQSL(total_count, performance_count, load, unload)
    sut = lg.ConstructFastSUT(issue, flush)
    try:
        target._start_test(lambda: lg.StartTestWithLogSettings(sut, qsl, settings, log_settings, audit_config))
    finally:
        if on_end is not None:
            on_end()
        lg.DestroyFastSUT(sut)
        lg.DestroyQSL(qsl)
