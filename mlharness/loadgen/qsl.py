"""Query sample library: samples are pre-processed when LoadGen loads them (untimed, per the MLPerf rules) and
kept in RAM as one contiguous array per model input, so forming a batch in the timed path is one gather.

An input that is not a tensor (a chat prompt, a session, a pipeline item, jagged lists, a graph seed) is an
:class:`InputKind`: its package under ``mlharness/kinds/`` registers how a sample of it is checked and kept, how a
gathered batch becomes the model's arrays, and what replaces LoadGen's indices; the run's context holds the one its
input asks for (``ctx["input_kind"]``). This module never names a kind."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlharness.errors import DatasetError, HookError
from mlharness.manifest.hooks import HookSet

log = logging.getLogger(__name__)

INPUT_KIND = "input_kind"  # the ctx entry of the run's InputKind: the QSL and the batch path read the same one


@dataclass(frozen=True)
class InputKind:
    """What an input of a kind's ``inputs[0].type`` asks of the QSL and of the timed path."""

    # preprocess's value for one sample -> the sample checked, as a 0-d object array (stacked and gathered like
    # any input); load time, untimed
    sample: Callable[[Any, int], np.ndarray]
    # a gathered batch of those cells -> the model's arrays (timed path); None: the cells as they are
    to_model: Callable[[np.ndarray], list[np.ndarray]] | None = None
    # what replaces LoadGen's indices (``loaded(samples)``, ``unloaded(indices)``, ``take(n)``); None: LoadGen's
    order: Any = None


def input_kind(ctx: dict[str, Any]) -> InputKind | None:
    """The run's InputKind, which the run's context holds (``run/context.py``); None for tensors."""
    return ctx.get(INPUT_KIND)


MAX_SAMPLES = 1_000_000_000
"""Largest dataset a run accepts from ``init``: the QSL keeps an index entry per sample (8 bytes each)."""


def check_sample_count(hooks: HookSet, count: int | None, total: Any) -> int:
    """The dataset size ``init(count)`` returned, checked (an int from 1 to MAX_SAMPLES) and limited to
    ``count`` when one is given."""
    loaded = hooks.loaded
    manifest = str((loaded.dataset_source or loaded.source).path)
    if not isinstance(total, int | np.integer) or isinstance(total, bool) or total < 1:
        shown = repr(total) if len(repr(total)) < 80 else f"{repr(total)[:80]}..."
        raise HookError("init", manifest, f"init({count}) must return the dataset size (an int >= 1), got {shown}")
    total = min(int(total), count) if count else int(total)
    if total > MAX_SAMPLES:
        shown = f"{total:,}" if total < 10**18 else f"a {len(str(total))}-digit number of"
        raise HookError("init", manifest, f"init({count}) returned {shown} samples; at most {MAX_SAMPLES:,} are "
                                          "supported (pass --count to use fewer)")
    return total


def sample_argument(hooks: HookSet, index: int) -> Any:
    """What ``preprocess`` gets for sample ``index``, by the dataset manifest's convention: its ``sample(index)``
    hook's answer (the file's path, as the MLModelScope agents passed the input itself), else the index, as a
    string for a historical manifest (MLHarness passed it so; its hooks read ``dataset[int(data)]``)."""
    if "sample" in hooks:
        return hooks.call("sample", index)
    return str(index) if hooks.loaded.historical is not None else index


class SampleStore:
    """Pre-processed samples of the loaded set. ``gather(indices)`` returns one batch array per model input."""

    def __init__(self, total: int, n_inputs: int):
        self.total = total
        self.n_inputs = n_inputs
        try:
            self._rows = np.full(total, -1, dtype=np.int64)
        except MemoryError:
            raise DatasetError(f"not enough memory for the index of {total:,} samples; pass --count to use "
                               "fewer") from None
        self._arrays: list[np.ndarray] | None = None  # contiguous, when every sample has the same shapes
        self._ragged: dict[int, tuple[np.ndarray, ...]] = {}
        self._lock = threading.Lock()

    def put_all(self, samples: dict[int, tuple[np.ndarray, ...]]) -> None:
        with self._lock:
            merged = dict(self._ragged)
            if self._arrays is not None:
                for index in np.nonzero(self._rows >= 0)[0]:
                    row = self._rows[index]
                    merged[int(index)] = tuple(a[row, ...] for a in self._arrays)  # 0-d arrays stay arrays
            merged.update(samples)
            self._pack(merged)

    def drop(self, indices: list[int]) -> None:
        with self._lock:
            keep: dict[int, tuple[np.ndarray, ...]] = {}
            drop = set(indices)
            for index in np.nonzero(self._rows >= 0)[0]:
                if int(index) not in drop and self._arrays is not None:
                    keep[int(index)] = tuple(a[self._rows[index], ...] for a in self._arrays)
            for index, value in self._ragged.items():
                if index not in drop:
                    keep[index] = value
            self._pack(keep)

    def _pack(self, samples: dict[int, tuple[np.ndarray, ...]]) -> None:
        self._rows[:] = -1
        self._arrays = None
        self._ragged = {}
        if not samples:
            return
        order = sorted(samples)
        first = samples[order[0]]
        uniform = all(
            len(samples[i]) == len(first)
            and all(x.shape == f.shape and x.dtype == f.dtype for x, f in zip(samples[i], first, strict=True))
            for i in order
        )
        if uniform:
            self._arrays = [np.stack([samples[i][k] for i in order]) for k in range(len(first))]
            self._rows[order] = np.arange(len(order))
        else:
            self._ragged = samples
            self._rows[order] = 0

    def sample_nbytes(self) -> int | None:
        """Bytes of one sample's inputs when they are packed contiguously; None for ragged samples."""
        arrays = self._arrays
        if arrays is None:
            return None
        return sum(a[0].nbytes for a in arrays if len(a))

    def loaded_count(self) -> int:
        return int((self._rows >= 0).sum())

    def gather(self, indices: np.ndarray) -> list[np.ndarray]:
        rows = self._rows[indices]
        if (rows < 0).any():
            missing = indices[rows < 0][:5].tolist()
            raise DatasetError(f"samples {missing} were issued but not loaded by the QSL")
        if self._arrays is not None:
            if len(indices) == 1:
                r = int(rows[0])
                return [a[r : r + 1] for a in self._arrays]
            return [a[rows] for a in self._arrays]
        per_sample = [self._ragged[int(i)] for i in indices]
        if len(per_sample) == 1:  # a view with a batch axis: no copy of a large volume per query
            return [x[None] for x in per_sample[0]]
        try:
            return [np.stack([s[k] for s in per_sample]) for k in range(len(per_sample[0]))]
        except ValueError as e:
            raise DatasetError(
                f"samples {indices.tolist()} have different shapes and cannot be batched; use max_batchsize 1"
            ) from e


class SampleLoader:
    """LoadGen's load/unload callbacks: the dataset's ``load``/``unload`` hooks, then ``preprocess`` per sample."""

    def __init__(
        self,
        hooks: HookSet,
        ctx: dict[str, Any],
        store: SampleStore,
        workers: int = 1,
        on_progress: Callable[[int, int], None] | None = None,
        tracer: Any = None,
    ):
        self.tracer = tracer
        self.hooks = hooks
        self.ctx = ctx
        self.store = store
        self.workers = max(1, workers)
        self.on_progress = on_progress
        self.prepare: Callable[[Any], None] | None = None  # called with each object sample (a chat prompt) loaded
        self.error: BaseException | None = None
        self.kind = input_kind(ctx)  # an input that is not a tensor: its kind's checks
        self.order = self.kind.order if self.kind is not None else None  # what it may play next, if it says

    def _one(self, index: int) -> tuple[np.ndarray, ...]:
        if self.tracer is None:
            return self._preprocess(index)
        t0 = self.tracer.now()
        out = self._preprocess(index)
        self.tracer.span("preprocess", "load", t0, self.tracer.now(), {"sample_index": index})
        return out

    def _preprocess(self, index: int) -> tuple[np.ndarray, ...]:
        if "preprocess" in self.hooks:
            out = self.hooks.call("preprocess", self.ctx, sample_argument(self.hooks, index))
        else:
            raise HookError("preprocess", self.hooks.manifest, "the manifest defines no preprocess hook")
        if self.kind is not None:  # kept alone, as one object per sample (the schema allows no other input)
            cell = self.kind.sample(out, index)
            if self.prepare is not None:
                self.prepare(cell[()])  # what the predictors send for it, built now rather than on the timed path
            return (cell,)
        specs = self.ctx.get("inputs") or []
        # with a predict hook, the declared inputs are the model's and the samples are what the hook cuts them from
        declared = [] if "predict" in self.hooks else specs
        return check_preprocessed(out, index, self.store.n_inputs, declared, self.hooks.manifest)

    def load(self, indices: list[int]) -> None:
        if "load" in self.hooks:
            self.hooks.call("load", list(indices))
        samples: dict[int, tuple[np.ndarray, ...]] = {}
        done = 0
        if self.workers == 1 or len(indices) < 2:
            for index in indices:
                samples[index] = self._one(index)
                done += 1
                if self.on_progress and done % 16 == 0:
                    self.on_progress(done, len(indices))
        else:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="mlharness-load") as pool:
                for index, arrays in zip(indices, pool.map(self._one, indices), strict=True):
                    samples[index] = arrays
                    done += 1
                    if self.on_progress and done % 16 == 0:
                        self.on_progress(done, len(indices))
        if self.on_progress:
            self.on_progress(len(indices), len(indices))
        self.store.put_all(samples)
        if self.order is not None:
            self.order.loaded(samples)

    def unload(self, indices: list[int]) -> None:
        self.store.drop(list(indices))
        if self.order is not None:
            self.order.unloaded(list(indices))
        if "unload" in self.hooks:
            self.hooks.call("unload", list(indices))


def check_preprocessed(out: Any, index: int, n_inputs: int, specs: list[dict[str, Any]],
                       manifest: str) -> tuple[np.ndarray, ...]:
    """What ``preprocess`` returned for sample ``index``, as one array per model input, checked against the
    manifest's ``inputs`` (count, numeric dtype, element_type, shape). Runs at load time, untimed."""

    def fail(message: str) -> HookError:
        return HookError("preprocess", manifest, f"sample {index}: {message}")

    if out is None or isinstance(out, dict | str | bytes):
        raise fail(f"returned {type(out).__name__}; it must return one array per model input "
                   f"({n_inputs}), as an array or a list/tuple of arrays")
    arrays = tuple(out) if isinstance(out, tuple | list) else (out,)
    if len(arrays) != n_inputs:
        raise fail(f"returned {len(arrays)} array(s); the model has {n_inputs} input(s)")
    result = []
    for k, a in enumerate(arrays):
        spec = specs[k] if k < len(specs) else {}
        label = f"input {k}" + (f" ('{spec['name']}')" if spec.get("name") else "")
        if not isinstance(a, np.ndarray):
            try:
                a = np.asarray(a)
            except Exception as e:  # noqa: BLE001 - whatever the hook returned, say what it was
                raise fail(f"{label} is a {type(a).__name__}, not array-like: {e}") from None
        declared = spec.get("element_type")
        if declared == "bytes":
            result.append(a)
            continue
        if a.dtype.kind not in "biuf":
            raise fail(f"{label} is {type(arrays[k]).__name__} with dtype {a.dtype}; expected a numeric array "
                       f"(field 'inputs[{k}].element_type' is {declared or 'float32'})")
        if declared not in (None, "bytes", "bfloat16") and a.dtype != np.dtype(declared):
            raise fail(f"{label} is a {a.dtype} array but field 'inputs[{k}].element_type' declares {declared}; "
                       f"return {declared} (e.g. .astype(np.{declared})) or correct the declaration")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
            raise fail(f"{label} holds {bad} NaN or infinite value(s) (first at flat index "
                       f"{int(np.flatnonzero(~np.isfinite(a))[0])}); a model input must be finite: check the "
                       "sample's data and what preprocess computes from it")
        shape = spec.get("shape")
        if shape is not None and not _shape_matches(shape, a.shape):
            raise fail(f"{label} has shape {tuple(a.shape)} but field 'inputs[{k}].shape' declares {list(shape)} "
                       "per sample (without the batch axis; -1 or a name marks a dynamic axis)")
        result.append(a)
    return tuple(result)


def _shape_matches(declared: list[Any], actual: tuple[int, ...]) -> bool:
    return len(declared) == len(actual) and all(
        not isinstance(d, int) or d == -1 or d == a for d, a in zip(declared, actual, strict=True))
