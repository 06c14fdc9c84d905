"""The timed path of one batch, written once for every backend and scenario: predict (or the manifest's predict
hook), postprocess, and the encoding of one response per sample in the declared dtype; and the batching strategy
of each scenario."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlharness.errors import HookError, MLHarnessError
from mlharness.loadgen.qsl import SampleStore, input_kind
from mlharness.manifest.hooks import HookSet
from mlharness.predictors.base import Predictor
from mlharness.predictors.checks import misshapen_output


@dataclass
class Strategy:
    """How workers form batches. ``coalesce_wait_s`` None: a batch never spans queries (SingleStream,
    MultiStream, Offline); a number: Server-style dynamic batching across queries for at most that long."""

    name: str
    max_batchsize: int
    coalesce_wait_s: float | None = None
    one_query_at_a_time: bool = False  # SingleStream/MultiStream: LoadGen waits for each query to complete

    @property
    def server(self) -> bool:
        """Batches span queries (the Server): arrivals wait in a queue that runners take from."""
        return self.coalesce_wait_s is not None

    @property
    def server_batches(self) -> bool:
        """A Server batch may hold several samples: the model's batch times decide how many a runner takes."""
        return self.server and self.max_batchsize > 1

    @classmethod
    def for_scenario(cls, scenario: str, max_batchsize: int, server_max_wait_ms: float = 0.0) -> Strategy:
        if scenario == "Server":
            return cls("ServerStrategy", max_batchsize, server_max_wait_ms / 1000.0)
        return cls(f"{scenario}Strategy", max_batchsize, None, scenario in ("SingleStream", "MultiStream"))


class Pipeline:
    """predict + postprocess + encoding for one batch: written once for every backend and scenario."""

    def __init__(self, predictor: Predictor, hooks: HookSet, ctx: dict[str, Any], store: SampleStore,
                 response_dtype: np.dtype, tracer: Any = None):
        self.tracer = tracer
        self.predictor = predictor
        self.hooks = hooks
        self.ctx = ctx
        self.store = store
        self.dtype = response_dtype
        self._post = hooks.get("postprocess")
        self._post_indices = _takes_indices(self._post)  # postprocess(ctx, outputs, indices)
        self._predict = hooks.get("predict")
        kind = input_kind(ctx)  # an input that is not a tensor: the one the QSL checked
        self._order = kind.order if kind is not None else None
        self._to_model = kind.to_model if kind is not None else None

    def run(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Returns (buffer uint8, byte offsets of each response [n+1])."""
        if self._order is not None:  # e.g. a time-ordered stream: LoadGen's indices only count (kinds/jagged/)
            indices = self._order.take(len(indices))
        if self.tracer is not None:
            return self._run_traced(indices)
        return self.respond(self.infer(self.store.gather(indices)), len(indices), indices)

    def _run_traced(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``run`` with a span per stage; a separate method so the untraced path carries no checks."""
        tr, now = self.tracer, self.tracer.now
        t0 = now()
        batch = self.store.gather(indices)
        t1 = now()
        tr.span("gather", "model", t0, t1, {"samples": len(indices)})
        outputs = self.infer(batch)
        t2 = now()
        tr.span("predict", "model", t1, t2, {"samples": len(indices)})
        encoded = self.respond(outputs, len(indices), indices)
        tr.span("postprocess", "model", t2, now(), {"samples": len(indices)})
        return encoded

    def infer(self, batch: list[np.ndarray]) -> Any:
        """The model on one batch: the predictor, or the manifest's ``predict(ctx, run, inputs)`` hook."""
        if self._to_model is not None:  # the input kind's samples -> the model's arrays (jagged lists, graph seeds)
            batch = self._to_model(batch[0])
        if self._predict is None:
            return self.predictor.predict(batch)
        try:
            return self._predict(self.ctx, self.predictor.predict, batch)
        except MLHarnessError:
            raise
        except Exception as e:
            raise self.hooks.runtime_error("predict", e) from e

    def respond(self, outputs: Any, n: int, indices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """postprocess (or the first output as is) and the encoding of one response per sample; a postprocess
        with a third parameter also gets the batch's sample indices (detection responses carry them)."""
        try:
            if self._post is None:
                return self.encode(outputs[0], n, indices)
            try:
                if self._post_indices:
                    responses = self._post(self.ctx, outputs, indices)
                else:
                    responses = self._post(self.ctx, outputs)
            except Exception as e:
                raise self.hooks.runtime_error("postprocess", e) from e
            return self.encode(responses, n, indices)
        except HookError as e:  # blame the model, not postprocess, for an output without a batch axis
            better = misshapen_output(outputs, n, self.predictor, by_hook=self._predict is not None)
            if better is None:
                raise
            raise better from e

    def warmup(self, indices: np.ndarray, n: int) -> None:
        """Run the model (not the hooks around it) ``n`` times on real samples, before LoadGen times anything."""
        batch = self.store.gather(indices)
        for _ in range(n):
            self.infer(batch)

    def encode(self, responses: Any, n: int, indices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One response per sample in the declared dtype. A float response is refused when it holds NaN or
        infinity, naming the sample (``indices``: the batch's sample indices): the cast
        would turn them into arbitrary integers that are then scored as data (a NaN image into black pixels)."""
        if isinstance(responses, np.ndarray) and responses.ndim >= 1 and responses.shape[0] == n:
            self._check_finite(responses, range(n), indices)
            try:
                arr = np.ascontiguousarray(responses, dtype=self.dtype)
            except (TypeError, ValueError) as e:
                raise HookError("postprocess", self.hooks.manifest,
                                f"returned a {responses.dtype} array that cannot be encoded as {self.dtype}: {e}"
                                ) from e
            size = arr.nbytes // n if n else 0
            return arr.reshape(-1).view(np.uint8), np.arange(n + 1, dtype=np.int64) * size
        if not isinstance(responses, list | tuple):
            raise HookError(
                "postprocess", self.hooks.manifest,
                f"must return one response per sample ({n}): a list, a tuple or an array with a batch axis; "
                f"got {type(responses).__name__}"
                + (f" of shape {responses.shape}" if isinstance(responses, np.ndarray) else ""),
            )
        if len(responses) != n:
            raise HookError("postprocess", self.hooks.manifest,
                            f"returned {len(responses)} responses for a batch of {n} samples")
        parts = [self._one(r, i, indices) for i, r in enumerate(responses)]
        sizes = np.fromiter((len(p) for p in parts), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return np.frombuffer(b"".join(parts), dtype=np.uint8), offsets

    def _one(self, r: Any, i: int, indices: np.ndarray | None = None) -> bytes:
        if isinstance(r, bytes | bytearray | memoryview):
            return bytes(r)
        if isinstance(r, str):  # MLHarness manifests return JSON text per sample
            try:
                r = json.loads(r)
            except json.JSONDecodeError as e:
                raise HookError("postprocess", self.hooks.manifest,
                                f"response {i} is a string but not JSON: {e}") from e
        if not isinstance(r, np.ndarray):  # a list or a number: its own dtype first, so a NaN is seen before the cast
            try:
                r = np.asarray(r)
            except (TypeError, ValueError) as e:
                raise HookError("postprocess", self.hooks.manifest,
                                f"response {i} cannot be encoded as {self.dtype}: {e}") from e
        self._check_finite(r[np.newaxis], [i], indices)
        try:
            return np.asarray(r, dtype=self.dtype).tobytes()
        except (TypeError, ValueError) as e:
            raise HookError("postprocess", self.hooks.manifest,
                            f"response {i} cannot be encoded as {self.dtype}: {e}") from e

    def _check_finite(self, batch: np.ndarray, positions: Any, indices: np.ndarray | None) -> None:
        """Refuse NaN or infinity in a float response, naming the sample: cast to an integer dtype they become
        arbitrary numbers scored as data, and in a float response they are no answer a metric can score."""
        if batch.dtype.kind not in "fc" or bool(np.isfinite(batch).all()):  # one pass over a good batch
            return
        for k, position in enumerate(positions):
            bad = batch[k].size - int(np.count_nonzero(np.isfinite(batch[k])))
            if bad:
                sample = (f"of sample {int(indices[position])}" if indices is not None and position < len(indices)
                          else f"at position {position} of the batch")
                raise HookError("postprocess", self.hooks.manifest,
                                f"the {batch.dtype} response {sample} holds {bad} non-finite values (NaN or "
                                f"infinity), refused as a {self.dtype} response"
                                + (" (the cast would make them arbitrary numbers, scored as data)"
                                   if np.dtype(self.dtype).kind in "iub" else "") + ": the model's output is bad")


def _takes_indices(fn: Callable[..., Any] | None) -> bool:
    """True when a postprocess hook declares a third positional parameter (the sample indices)."""
    if fn is None:
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in params) >= 3
