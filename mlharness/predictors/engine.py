"""A base for generative predictors that run their engine on a thread of their own.

:class:`QueuedGenerator` implements :meth:`submit` (enqueue and return), :meth:`drain` and :meth:`close` of the
contract in :mod:`mlharness.predictors.generative`; a subclass implements :meth:`generate`, which runs one batch
of requests (those waiting when the engine became free, at most ``max_batchsize``) and streams their tokens.
Whatever ``generate`` leaves unfinished (it raised, or forgot a request) is failed here, so every request ends
exactly once.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections import deque
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.generative import GenerativePredictor, TokenRequest, TokenStream

log = logging.getLogger(__name__)


class OnceStream:
    """Wraps a :class:`TokenStream`: ``first`` at most once, then exactly one of ``done``/``fail``; later calls
    are ignored. ``tokens`` counts the ids streamed so far (for error messages)."""

    __slots__ = ("stream", "first_sent", "finished", "tokens")

    def __init__(self, stream: TokenStream):
        self.stream = stream
        self.first_sent = False
        self.finished = False
        self.tokens = 0

    def first(self, ids: np.ndarray) -> None:
        if not len(ids):
            return  # not a first token: the real one may still come
        if not self.first_sent and not self.finished:
            self.first_sent = True
            self.tokens = max(self.tokens, len(ids))
            self.stream.first(np.asarray(ids, dtype=np.int32))

    def done(self, ids: np.ndarray) -> None:
        if not self.finished:
            self.finished = True
            self.stream.done(np.asarray(ids, dtype=np.int32))

    def fail(self, error: BaseException) -> None:
        if not self.finished:
            self.finished = True
            self.stream.fail(error)


class QueuedGenerator(GenerativePredictor):
    """Requests wait in a queue; one engine thread takes every waiting request (up to ``max_batchsize``) each
    time it is free and hands them to :meth:`generate` as one batch."""

    def load(self) -> None:
        self._waiting: deque[tuple[TokenRequest, OnceStream]] = deque()
        self._cond = threading.Condition()
        self._pending = 0
        self._closed = False
        self.load_engine()
        self._thread = threading.Thread(target=self._loop, name=f"mlharness-{self.name}", daemon=True)
        self._thread.start()

    @abc.abstractmethod
    def load_engine(self) -> None:
        """Build the engine (called once, from :meth:`load`)."""

    def generate(self, batch: list[tuple[TokenRequest, OnceStream]]) -> None:
        """Generate every request of ``batch``, calling its stream's ``first`` then ``done`` (or ``fail``)."""
        raise NotImplementedError(f"{self.name} implements neither generate() nor run_engine()")

    def submit(self, requests: list[TokenRequest], streams: list[TokenStream]) -> None:
        with self._cond:
            if self._closed:
                raise PredictorError(f"{self.name}: the engine is closed")
            for r, s in zip(requests, streams, strict=True):
                self._waiting.append((r, OnceStream(s)))
            self._pending += len(requests)
            self._cond.notify_all()

    def drain(self, timeout_s: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout=timeout_s)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            left = list(self._waiting)
            self._waiting.clear()
            self._cond.notify_all()
        for _, s in left:
            s.fail(PredictorError(f"{self.name}: the engine was closed before this request ran"))
        self.finished(len(left))
        if getattr(self, "_thread", None) is not None:
            self._thread.join(timeout=30)

    def finished(self, n: int) -> None:
        """``n`` requests ended (done or failed): :meth:`drain` may return."""
        with self._cond:
            self._pending -= n
            self._cond.notify_all()

    def take(self, limit: int, block: bool = True) -> list[tuple[TokenRequest, OnceStream]] | None:
        """Up to ``limit`` waiting requests (waiting for one when ``block``); None once closed and empty."""
        with self._cond:
            if block:
                self._cond.wait_for(lambda: self._waiting or self._closed)
            if self._closed and not self._waiting:
                return None
            return [self._waiting.popleft() for _ in range(min(limit, len(self._waiting)))]

    def _loop(self) -> None:
        try:
            self.run_engine()
        except BaseException as e:  # noqa: BLE001 - the engine died: what waits now can never run
            log.error("%s: the engine stopped: %s", self.name, e)
            with self._cond:
                self._closed = True
                left = list(self._waiting)
                self._waiting.clear()
            for _, s in left:
                s.fail(e)
            self.finished(len(left))

    def run_engine(self) -> None:
        """The engine thread: each time the engine is free, every waiting request (up to ``max_batchsize``) runs
        as one batch. Engines that batch continuously override this (see the vllm predictor)."""
        limit = max(1, int(self.config.max_batchsize))
        while (batch := self.take(limit)) is not None:
            if batch:
                self.run_batch(batch)

    def run_batch(self, batch: list[tuple[TokenRequest, OnceStream]]) -> None:
        """:meth:`generate` one batch; whatever it leaves unfinished is failed, and the batch counts as ended."""
        try:
            self.generate(batch)
        except BaseException as e:  # noqa: BLE001 - every request must end
            for _, s in batch:
                s.fail(e)
        finally:
            for req, s in batch:
                if not s.finished:
                    s.fail(PredictorError(f"{self.name} ended sample {req.index} without a result"))
            self.finished(len(batch))

    def warmup(self, inputs: list[np.ndarray], n: int = 1) -> None:  # the SUT warms token models up itself
        pass

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "batching": "waiting requests batched each time the engine is free"}
