"""The completion contract every LoadGen-facing object shares (:class:`~mlharness.loadgen.sut.SystemUnderTest`,
:class:`~mlharness.loadgen.sut.NetworkQDL`): count what was issued and completed, keep the first error, complete a
batch from one buffer, or with empty responses once the run has failed or was interrupted; and for the SUTs that
complete samples one by one (tokens, sessions, pipelines), one sample, never after LoadGen's test has ended."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError, RunFailed
from mlharness.loadgen.interrupt import GUARD, Interrupted

log = logging.getLogger(__name__)


class Completions:
    """The completion contract SystemUnderTest and NetworkQDL share: count what was issued and completed,
    keep the first error, complete a batch from one buffer, or with empty responses once the run has failed."""

    failure_label = "the timed path"

    def __init__(self, on_failure: Callable[[BaseException], None] | None):
        self.on_failure = on_failure
        self._count_lock = threading.Lock()
        self.issued = 0
        self.completed = 0
        self.batches = 0
        self.error: BaseException | None = None
        self.interrupted: Interrupted | None = None
        # no model runs any more (a failure or a signal): every sample is completed empty at once
        self.halted = False
        self._lg: Any = None
        # StartTest has returned: LoadGen's sample objects are gone, and a late completion must not reach it
        self._ended = False
        self._end_lock = threading.Lock()

    def _count_issued(self, n: int) -> None:
        with self._count_lock:
            self.issued += n

    def _count(self, n: int, batches: int = 1) -> None:
        with self._count_lock:
            self.completed += n
            self.batches += batches

    def fail(self, e: BaseException) -> None:
        with self._count_lock:
            first = self.error is None
            if first:
                self.error = e
                self.halted = True
        if first:
            log.error("%s failed: %s", self.failure_label, e)
            if self.on_failure is not None:
                self.on_failure(e)

    def drain(self, interrupted: Interrupted) -> None:
        """A signal: stop running the model; what was issued and what LoadGen issues from now on is completed
        with empty responses as it reaches a worker, so LoadGen can end its test."""
        with self._count_lock:
            if self.interrupted is None:
                self.interrupted = interrupted
            self.halted = True

    def _start_test(self, start_test: Callable[[], None]) -> None:
        """LoadGen's StartTest on a worker thread, so that SIGINT/SIGTERM are handled while it runs."""
        GUARD.run_test(start_test, self.drain)

    def complete_parts(self, parts: list[tuple[list[int], np.ndarray | None, np.ndarray | None]]) -> None:
        """Complete several batches with one ``QuerySamplesComplete``: sample ``ids[k]`` of a part with
        ``buf[offsets[k]:offsets[k+1]]``, or with an empty response when the part has no buffer (after a
        failure, so LoadGen can finish). Every buffer is alive until the call returns."""
        lg = self._lg
        response = lg.QuerySampleResponse
        responses = []
        for ids, buf, offsets in parts:
            if buf is None:
                responses += [response(int(i), 0, 0) for i in ids]
                continue
            # plain ints from tolist(): building the response objects is the per-sample cost here
            starts = (offsets[:-1] + buf.ctypes.data).tolist()
            sizes = np.diff(offsets).tolist()
            responses += [response(i, s, n) for i, s, n in zip(ids, starts, sizes, strict=True)]
        lg.QuerySamplesComplete(responses)
        self._count(len(responses), len(parts))

    def _end_test(self) -> None:
        """StartTest returned (LoadGen's ``on_end``): waits for a completion in flight, refuses the later ones."""
        with self._end_lock:
            self._ended = True

    def complete_one(self, sample_id: int, data: np.ndarray | None, n_tokens: int | None, what: str) -> bool:
        """Complete one sample of a SUT that completes samples one by one (empty when ``data`` is None; with its
        token count where given); once the test has ended, nothing is handed to LoadGen and ``what`` is logged as
        finished late. True if LoadGen was handed the sample."""
        with self._end_lock:
            if self._ended:
                log.warning("%s finished after the LoadGen test had ended; ignored", what)
                return False
            lg = self._lg
            if data is None:
                response = lg.QuerySampleResponse(sample_id, 0, 0)
            elif n_tokens is None:
                response = lg.QuerySampleResponse(sample_id, data.ctypes.data, data.nbytes)
            else:
                response = lg.QuerySampleResponse(sample_id, data.ctypes.data, data.nbytes, n_tokens)
            lg.QuerySamplesComplete([response])
        self._count(1)
        return True

    def _complete(self, ids: list[int], buf: np.ndarray, offsets: np.ndarray) -> None:
        self.complete_parts([(ids, buf, offsets)])

    def _complete_empty(self, ids: list[int]) -> None:
        self.complete_parts([(ids, None, None)])

    def _raise_if_failed(self) -> None:
        if self.interrupted is not None and self.issued == self.completed:
            raise self.interrupted  # the user's signal explains the end; a failure before it was logged
        if self.issued != self.completed:
            raise RunFailed(f"internal error: {self.issued} samples issued but {self.completed} completed")
        if self.error is not None:
            err = self.error
            if isinstance(err, MLHarnessError):
                raise RunFailed(f"the run failed: {err}") from err
            raise RunFailed(f"the run failed: {type(err).__name__}: {err}") from err
