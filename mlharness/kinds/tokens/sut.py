"""The SUT of a generative model: each sample's response is a stream of token ids.

Each issued sample becomes a :class:`~mlharness.predictors.generative.TokenRequest` (the prompt ids
``preprocess`` left in the sample store, or the sample's chat messages, kept there as one object) submitted to a generative predictor (round robin over the instances),
whose engine batches it with the others; ``submit`` only enqueues for the engine. A small query (Server,
Interactive, SingleStream: one sample) is submitted from ``issue`` itself, which saves a thread wake-up on the
way to the first token; a large one (Offline) is handed to a dispatcher thread so that LoadGen's issue thread
returns at once. As soon as a sample's first token exists the stream reports it to LoadGen (``FirstTokenComplete``:
LoadGen's TTFT; every scenario but Offline needs it before the sample completes); when the sample is done it is
completed with all its ids and ``n_tokens``, the ids written in the manifest's ``response.element_type`` (int32,
or int64), or with the response the predictor gave beside them (``SampleStream.done``).

Every sample completes exactly once. A response of fewer than two tokens (LoadGen refuses ``n_tokens == 1``) or
a generation that fails is recorded as the run's error naming the sample; from then on every sample is completed
at once without generating, so LoadGen reaches its end and the runner fails the run (the failure watchdog and
signal handling are those of :mod:`mlharness.loadgen.completion`).

What LoadGen is handed, whatever the predictor does (its calls may come from any thread, late, twice, or never):

- Outside Offline, a sample's ``FirstTokenComplete`` always precedes its completion. In accuracy mode LoadGen's
  log thread writes each completed sample's first-token record (``AsyncLog::LogAccuracy``); a sample completed
  without one makes it read a record that does not exist and the process dies of SIGSEGV. So a sample that ends
  without a first token (it failed, was abandoned, or was issued after the run had failed) gets an empty one just
  before its completion, and a real first token is reported only while the sample is not finished: both happen
  under the sample's lock, so neither can overtake the other.
- A first token carries at least one id (an empty ``first`` from an engine is not a first token). A completion
  carries the sample's ids with ``n_tokens`` of at least 2, or, for a failed sample, no data and ``n_tokens``
  0 (LoadGen logs it; the run fails anyway).
- Every ``FirstTokenComplete`` and ``QuerySamplesComplete`` is made from one thread, in the order the streams
  made them (:meth:`TokenSUT._call_loadgen`): LoadGen's log thread drains each calling thread's buffer in no
  fixed order, so a first token reported on one thread and the completion of the same sample on another (a
  sample abandoned by the thread that hit a failure) could reach the accuracy log in the wrong order; that, too,
  reads a first-token record that does not exist.
- No LoadGen call is made once ``StartTest`` has returned: the calling thread drops it, under a lock, after the
  test has ended (a late result of an engine thread).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from mlharness.errors import ManifestError, RunFailed
from mlharness.kinds.chat import BadChatInput
from mlharness.loadgen.completion import Completions
from mlharness.loadgen.qsl import SampleLoader, SampleStore
from mlharness.loadgen.sut import run_fast_sut
from mlharness.predictors.generative import GenerativePredictor, TokenRequest

log = logging.getLogger(__name__)
_STOP = object()
INLINE_SAMPLES = 8  # queries of at most this many samples are submitted from issue, larger ones by the dispatcher


class GenerationFailed(RunFailed):
    """A sample's generation failed or produced a response LoadGen cannot take."""


class SampleStream:
    """The :class:`~mlharness.predictors.generative.TokenStream` of one issued sample. Its first token and its
    completion reach LoadGen under the sample's lock, in that order, each at most once (see the module doc)."""

    __slots__ = ("sut", "id", "index", "first_sent", "finished", "_lock")

    def __init__(self, sut: TokenSUT, sample_id: int, index: int):
        self.sut, self.id, self.index = sut, sample_id, index
        self.first_sent = False
        self.finished = False
        self._lock = threading.Lock()

    def first(self, ids: np.ndarray) -> None:
        first = np.ascontiguousarray(np.asarray(ids).ravel(), dtype=np.int32)
        if not len(first):
            return  # no token yet: the completion reports the first token if none comes
        with self._lock:
            if self.first_sent or self.finished:
                return
            self.first_sent = True
            if self.sut.needs_first:
                self.sut.report_first(self.id, first)

    def done(self, ids: np.ndarray, response: np.ndarray | None = None) -> None:
        """``ids``: every generated token (their count is LoadGen's ``n_tokens``). ``response``: what the sample
        answers instead of the ids themselves, where the accuracy script reads something else (whisper: the
        transcript as label indices); written in the manifest's ``response.element_type``."""
        if not self._claim():
            return
        tokens = np.ascontiguousarray(np.asarray(ids).ravel(), dtype=np.int32)
        if len(tokens) < 2:
            self.sut.fail(GenerationFailed(
                f"sample {self.index} (qsl_idx) got a response of {len(tokens)} token(s); LoadGen needs at least 2 "
                "per response: keep generation.min_new_tokens at 2 or more, or fix the model's stop condition"))
        elif response is None and self.sut.text:
            self.sut.fail(GenerationFailed(
                f"sample {self.index} (qsl_idx): the predictor '{self.sut.predictors[0].name}' gave its token ids "
                "but no text, and the manifest's response.text asks for the text's UTF-8 bytes; that predictor "
                "does not write text responses"))
            self._complete(None)
            return
        data = tokens if response is None else np.asarray(response).ravel()
        data = np.ascontiguousarray(data, dtype=self.sut.response_dtype)
        self._complete(None if self.sut.halted else tokens, data)

    def fail(self, error: BaseException) -> None:
        if not self._claim():
            return
        self.sut.fail(GenerationFailed(f"generating sample {self.index} (qsl_idx) failed: "
                                       f"{type(error).__name__}: {error}"))
        self._complete(None)

    def abandon(self) -> None:
        """The run failed or was interrupted: complete the sample empty now, whatever the engine still does."""
        if self._claim():
            self._complete(None)

    def _claim(self) -> bool:
        """Mark the sample finished (a later first token is dropped); False if it was already."""
        with self._lock:
            if self.finished:
                if not self.sut.halted:  # after a failure or a signal the SUT completed it already
                    log.warning("sample %d was finished twice by the predictor; the second result is ignored",
                                self.index)
                return False
            self.finished = True
            return True

    def _complete(self, tokens: np.ndarray | None, data: np.ndarray | None = None) -> None:
        """Complete the claimed sample (empty when ``tokens`` is None) with ``data`` (the tokens in the response
        dtype unless given), its first token reported before if the scenario needs one and none was."""
        with self._lock:
            if self.sut.needs_first and not self.first_sent:
                self.sut.report_first(self.id, tokens[:1] if tokens is not None else None)
            self.first_sent = True
            if tokens is not None and data is None:
                data = np.ascontiguousarray(tokens, dtype=self.sut.response_dtype)
            self.sut.complete_tokens(self, None if tokens is None else data, 0 if tokens is None else len(tokens))


class TokenSUT(Completions):
    """LoadGen's callbacks for token-stream predictors, and the dispatcher thread behind them."""

    failure_label = "generation"

    def __init__(self, predictors: list[GenerativePredictor], store: SampleStore, scenario: str,
                 on_failure: Callable[[BaseException], None] | None = None, warmup: int = 0,
                 response_dtype: Any = np.int32, text: bool = False):
        super().__init__(on_failure)
        self.text = text  # response.text: every sample is done with its text's UTF-8 bytes as the response
        self.response_dtype = np.dtype(response_dtype)  # int32, or int64 where the accuracy script reads that
        self.predictors = predictors
        self.store = store
        self.needs_first = scenario != "Offline"  # LoadGen: TTFT before completion outside Offline
        self.warmup = warmup
        self.queries: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._next = 0
        self._next_lock = threading.Lock()  # issue and the dispatcher both submit
        self._thread: threading.Thread | None = None
        self._outstanding: set[SampleStream] = set()  # submitted, not yet completed
        self._outstanding_lock = threading.Lock()
        # every FirstTokenComplete / QuerySamplesComplete is made from this one thread (see the module doc)
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._caller: threading.Thread | None = None

    # -- LoadGen callbacks ---------------------------------------------------------------------------------------
    def issue(self, ids: list[int], indices: list[int]) -> None:
        if len(ids) <= INLINE_SAMPLES:
            self._submit(ids, indices)
        else:
            self.queries.put((ids, indices))

    def flush(self) -> None:
        pass

    def fail(self, e: BaseException) -> None:
        super().fail(e)
        self._abandon_outstanding()

    def drain(self, interrupted: Any) -> None:
        super().drain(interrupted)
        self._abandon_outstanding()

    def _abandon_outstanding(self) -> None:
        """Complete every sample the engine still holds: LoadGen can end its test without waiting for
        generations whose result no longer matters (the engine stops when the run closes it)."""
        with self._outstanding_lock:
            left = list(self._outstanding)
        for stream in left:
            stream.abandon()

    # -- the dispatcher --------------------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        while (item := self.queries.get()) is not _STOP:
            self._submit(*item)

    def _submit(self, ids: list[int], indices: list[int]) -> None:
        """One query's samples to the next instance (on LoadGen's issue thread or the dispatcher)."""
        self._count_issued(len(ids))
        streams = [SampleStream(self, int(i), int(x)) for i, x in zip(ids, indices, strict=True)]
        if self.halted:  # not generated: completed empty through the stream (first token, then completion)
            for s in streams:
                s.abandon()
            return
        try:
            prompts = [self.store.gather(np.asarray([x], dtype=np.int64))[0][0] for x in indices]
            requests = [TokenRequest(int(x), p) for x, p in zip(indices, prompts, strict=True)]
            with self._next_lock:
                predictor = self.predictors[self._next % len(self.predictors)]
                self._next += 1
            with self._outstanding_lock:
                self._outstanding.update(streams)
            predictor.submit(requests, streams)
            if self.halted:  # failed or interrupted while submitting: do not wait for these
                self._abandon_outstanding()
        except BaseException as e:  # noqa: BLE001 - the samples must still complete
            for s in streams:
                s.fail(e)

    def report_first(self, sample_id: int, ids: np.ndarray | None) -> None:
        """LoadGen's TTFT of one sample: its first id(s) (alive until the call returns), or an empty response."""
        def call(lg: Any) -> None:
            if ids is None:
                lg.FirstTokenComplete([lg.QuerySampleResponse(sample_id, 0, 0)])
            else:
                lg.FirstTokenComplete([lg.QuerySampleResponse(sample_id, ids.ctypes.data, ids.nbytes)])

        self._loadgen(call)

    def complete_tokens(self, stream: SampleStream, data: np.ndarray | None, n_tokens: int) -> None:
        """Complete one sample with its response data (alive until the call returns) and ``n_tokens``, or empty
        after a failure (``data`` None)."""
        def call(lg: Any) -> None:
            if data is None:
                response = lg.QuerySampleResponse(stream.id, 0, 0, 0)
            else:
                response = lg.QuerySampleResponse(stream.id, data.ctypes.data, data.nbytes, n_tokens)
            lg.QuerySamplesComplete([response])

        self._loadgen(call, counts=True)
        with self._outstanding_lock:
            self._outstanding.discard(stream)

    def _loadgen(self, call: Callable[[Any], None], counts: bool = False) -> None:
        """Hand one LoadGen call to the caller thread (the buffers it reads stay alive in the closure)."""
        self._calls.put((call, counts))

    def _call_loadgen(self) -> None:
        """The caller thread: LoadGen's calls in the order they were made, none once the test has ended (then
        LoadGen's objects are gone). LoadGen logs a call in a buffer of the thread that made it, and its log
        thread drains those buffers in no particular order: a sample's first token reported on one thread and
        its completion on another can reach the accuracy log completion first, and LoadGen then reads a
        first-token record that does not exist yet (SIGSEGV). One calling thread keeps every sample's order."""
        while (item := self._calls.get()) is not _STOP:
            call, counts = item
            with self._end_lock:
                if self._ended:
                    log.warning("a token stream reported after the LoadGen test had ended; ignored")
                    continue
                try:
                    call(self._lg)
                except BaseException as e:  # noqa: BLE001 - a call LoadGen refused fails the run, never the thread
                    self.fail(RunFailed(f"LoadGen refused a token response: {type(e).__name__}: {e}"))
                    continue
            if counts:
                self._count(1)

    def warm_up(self, indices: list[int]) -> None:
        """Untimed, before LoadGen starts its clock: generate the first loaded sample ``warmup`` times."""
        if self.warmup <= 0:
            return
        prompt = self.store.gather(np.asarray(indices[:1], dtype=np.int64))[0][0]
        for predictor in self.predictors:
            for _ in range(self.warmup):
                sink = _Sink()
                predictor.submit([TokenRequest(int(indices[0]), prompt)], [sink])
                predictor.drain(timeout_s=600)
                if sink.error is not None:
                    raise GenerationFailed(f"warming up on sample {indices[0]} (qsl_idx) failed: "
                                           f"{type(sink.error).__name__}: {sink.error}") from sink.error

    # -- one LoadGen test ----------------------------------------------------------------------------------------
    def run_test(self, loader: SampleLoader, total_count: int, performance_count: int, settings: Any,
                 log_settings: Any, audit_config: str, warmup: int = 0) -> None:
        import mlperf_loadgen as lg

        self._lg = lg
        self._thread = threading.Thread(target=self._dispatch, name="mlharness-tokens", daemon=True)
        self._thread.start()
        self.start_caller()
        try:
            run_fast_sut(self, loader, total_count, performance_count, settings, log_settings, audit_config,
                         self.issue, self.flush, self.warm_up, on_end=self._end_test)
        finally:
            self.queries.put(_STOP)
            self._thread.join(timeout=30)
            self.stop_caller()
        if isinstance(loader.error, BadChatInput):  # the user's input, as if refused before the run (exit 2)
            raise loader.error
        self._raise_if_failed()

    def start_caller(self) -> None:
        self._caller = threading.Thread(target=self._call_loadgen, name="mlharness-loadgen-calls", daemon=True)
        self._caller.start()

    def stop_caller(self) -> None:
        """Make the calls handed over so far, then end the caller thread."""
        self._calls.put(_STOP)
        if self._caller is not None:
            self._caller.join(timeout=30)


class _Sink:
    """A stream for warm-up requests: keeps only a failure."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def first(self, ids: np.ndarray) -> None:
        pass

    def done(self, ids: np.ndarray, response: np.ndarray | None = None) -> None:
        pass

    def fail(self, error: BaseException) -> None:
        self.error = error


def check_generative(predictors: list[Any], manifest: Any) -> list[GenerativePredictor]:
    """The instances of a token-stream manifest, refused with a clear error when the framework is not generative."""
    for p in predictors:
        if not isinstance(p, GenerativePredictor):
            raise ManifestError(manifest.path, "framework.name", f"response.kind is 'tokens', but framework "
                                f"'{manifest.model.framework.name}' does not generate token streams (use "
                                "transformers, vllm or another generative predictor)")
    return predictors
