"""What a ``type: jagged`` input is: each sample a few id or timestamp lists of varying length plus per-sample keys,
batched as flat values with offsets, and (with ``time_key``) played in the stream's time order.

``preprocess`` returns a dict: each name of ``keys`` to one number (e.g. ``ts_idx``, ``query_idx``,
``query_time``), each name of ``fields`` to a 1-D numeric array (e.g. a user's history of item ids). It is checked
at load time, untimed: a missing or misshapen field, or a field of ``ordered`` that goes back (a history whose
timestamps are not ascending), is refused naming the manifest, the sample and the field (exit status 2). A batch
is what torchrec's KeyedJaggedTensor and the reference's HSTU take, one array per entry in this order: each key
as a [batch] array, then per field its concatenated values and its offsets ([batch + 1], from 0): sample ``i``'s
list is ``values[offsets[i]:offsets[i + 1]]``. The gather and this packing run on the timed path, as the
reference's ``get_samples`` does its own.

The time-ordered sampler. The reference (``recommendation/dlrm_v3/main.py``, ``StreamingQuerySampler``) does not
answer the sample LoadGen names: LoadGen's index only counts, and each issued sample takes the next query of its
own walk over the stream, timestamp by timestamp (a query at ``ts_idx`` t may only follow the queries before t),
each timestamp's queries shuffled once and repeated ``num_repeats`` times in performance mode, once in accuracy
mode. With ``time_key`` set, :class:`StreamOrder` does the same over the samples LoadGen loaded: LoadGen's
indices of a batch are replaced by the next positions of the walk, under a lock shared by every worker, so the
time order holds in Server as in Offline; past the walk's end the samples of the last timestamp are played
again, never an earlier one. The response must therefore name the data it answered (dlrm-v3's ``[ts_idx,
query_idx, ...]``), and audits match on that, not on LoadGen's ``qsl_idx`` (TEST08).

The input's ``parameters``: ``fields`` (required), ``keys``, ``ordered`` (fields ascending within a sample),
``time_key`` (a key: the sampler's timestamp), ``repeats`` (each timestamp's queries per pass in performance
mode; default 1) and ``seed`` (the shuffle within a timestamp; default 0)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlharness.errors import HookError, ManifestError
from mlharness.loadgen.qsl import InputKind

JAGGED_INPUT = "jagged"
STREAM_ORDER = "stream_order"  # the ctx entry of the run's StreamOrder
JAGGED_SETTINGS = "jagged_settings"  # the ctx entry of the input's parameters, parsed once for the QSL and pipeline
PARAMETERS = {"fields": list, "keys": list, "ordered": list, "time_key": str, "repeats": int, "seed": int}


@dataclass(frozen=True)
class JaggedSettings:
    """The ``parameters`` of a jagged input, checked."""

    fields: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    ordered: tuple[str, ...] = ()
    time_key: str | None = None
    repeats: int = 1
    seed: int = 0


def jagged_settings(parameters: dict[str, Any] | None, manifest: Any) -> JaggedSettings:
    given = dict(parameters or {})
    for key, value in given.items():
        if key not in PARAMETERS:
            raise ManifestError(manifest, "inputs[0].parameters", f"unknown jagged parameter '{key}'; expected one "
                                                                  f"of {', '.join(PARAMETERS)}")
        kind = PARAMETERS[key]
        if not isinstance(value, kind) or isinstance(value, bool) or (
                kind is list and not all(isinstance(v, str) for v in value)):
            raise ManifestError(manifest, f"inputs[0].parameters.{key}", f"expected {kind.__name__}"
                                f"{' of names' if kind is list else ''}, got {value!r}")
    s = JaggedSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})
    if not s.fields:
        raise ManifestError(manifest, "inputs[0].parameters.fields", "a jagged input names its fields (the lists "
                                                                     "of each sample), e.g. [item_ids, timestamps]")
    for name in s.ordered:
        if name not in s.fields:
            raise ManifestError(manifest, "inputs[0].parameters.ordered", f"'{name}' is not one of fields")
    if s.time_key is not None and s.time_key not in s.keys:
        raise ManifestError(manifest, "inputs[0].parameters.time_key", f"'{s.time_key}' is not one of keys")
    if s.repeats < 1:
        raise ManifestError(manifest, "inputs[0].parameters.repeats", f"expected an int >= 1, got {s.repeats}")
    return s


@dataclass
class JaggedSample:
    keys: dict[str, float | int]
    fields: dict[str, np.ndarray] = field(default_factory=dict)


def jagged_sample(out: Any, index: int, s: JaggedSettings, manifest: str) -> np.ndarray:
    """``preprocess``'s dict for sample ``index`` checked and kept as a 0-d object array (stacked and gathered like
    any input)."""

    def fail(name: str, message: str) -> HookError:
        return HookError("preprocess", manifest, f"sample {index}, field '{name}': {message}")

    if not isinstance(out, dict):
        raise HookError("preprocess", manifest, f"sample {index}: returned {type(out).__name__}; a jagged input is "
                                                f"a dict of its keys {list(s.keys)} and fields {list(s.fields)}")
    sample = JaggedSample({})
    for name in s.keys:
        value = out.get(name)
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()
        if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool):
            raise fail(name, f"a key is one number per sample; got {type(value).__name__}")
        sample.keys[name] = value
    for name in s.fields:
        if name not in out:
            raise fail(name, "is missing")
        a = np.asarray(out[name])
        if a.ndim != 1 or a.dtype.kind not in "biuf":
            raise fail(name, f"a field is a 1-D numeric array; got {a.dtype} of shape {tuple(a.shape)}")
        if name in s.ordered and a.size > 1 and np.any(np.diff(a) < 0):
            at = int(np.flatnonzero(np.diff(a) < 0)[0])
            raise fail(name, f"goes back at position {at + 1} ({a[at]} then {a[at + 1]}); it must be ascending")
        sample.fields[name] = a
    cell = np.empty((), dtype=object)
    cell[()] = sample
    return cell


def jagged_batch(cells: np.ndarray, s: JaggedSettings) -> list[np.ndarray]:
    """A gathered batch of samples as the model's arrays: the keys, then each field's values and offsets."""
    samples = list(cells.reshape(-1))
    out = [np.asarray([x.keys[k] for x in samples]) for k in s.keys]
    for name in s.fields:
        parts = [x.fields[name] for x in samples]
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        out += [np.concatenate(parts), offsets]
    return out


class StreamOrder:
    """The reference's time-ordered walk over the loaded samples (see the module's docstring)."""

    def __init__(self, s: JaggedSettings, mode: str):
        self.settings = s
        self.repeats = 1 if mode == "accuracy" else s.repeats
        self._times: dict[int, float] = {}
        self._walk = np.zeros(0, np.int64)
        self._last = np.zeros(0, np.int64)
        self._next = 0
        self._lock = threading.Lock()

    def loaded(self, samples: dict[int, tuple[np.ndarray, ...]]) -> None:
        """LoadGen loaded these samples: the walk starts again over every loaded sample."""
        with self._lock:
            for index, arrays in samples.items():
                self._times[index] = arrays[0][()].keys[self.settings.time_key]
            self._rebuild()

    def unloaded(self, indices: list[int]) -> None:
        with self._lock:
            for index in indices:
                self._times.pop(int(index), None)
            self._rebuild()

    def _rebuild(self) -> None:
        rng = np.random.default_rng(self.settings.seed)
        by_time: dict[float, list[int]] = {}
        for index in sorted(self._times):
            by_time.setdefault(self._times[index], []).append(index)
        walk = []
        for t in sorted(by_time):
            group = np.asarray(by_time[t], np.int64)[rng.permutation(len(by_time[t]))]
            walk += [group] * self.repeats
        self._walk = np.concatenate(walk) if walk else np.zeros(0, np.int64)
        self._last = walk[-1] if walk else self._last
        self._next = 0

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` samples of the walk (replacing LoadGen's indices of one batch)."""
        with self._lock:  # the walk too: a concurrent load or unload replaces it
            k, self._next = self._next, self._next + n
            walk, last = self._walk, self._last
        head = walk[k:k + n]
        if len(head) == n:
            return head
        past = np.arange(max(k, len(walk)) - len(walk), k + n - len(walk))
        return np.concatenate([head, last[past % len(last)]])


def jagged_input(ctx: dict[str, Any], manifest: Any) -> JaggedSettings | None:
    """The run's jagged settings (parsed once, kept in ``ctx``: the QSL, the sampler and the pipeline read the same
    ones) when its input is jagged; None otherwise."""
    specs = ctx.get("inputs") or []
    if not specs or specs[0].get("type") != JAGGED_INPUT:
        return None
    if len(specs) > 1:
        raise ManifestError(manifest, "inputs", "a jagged input carries all of a sample's lists and keys: declare it "
                                                "alone")
    if JAGGED_SETTINGS not in ctx:
        ctx[JAGGED_SETTINGS] = jagged_settings(specs[0].get("parameters"), manifest)
    return ctx[JAGGED_SETTINGS]


def stream_order(ctx: dict[str, Any], manifest: Any) -> StreamOrder | None:
    """The run's StreamOrder (made once, kept in ``ctx``) when its input is jagged with a ``time_key``."""
    s = jagged_input(ctx, manifest)
    if s is None:
        return None
    if STREAM_ORDER not in ctx:
        ctx[STREAM_ORDER] = StreamOrder(s, ctx.get("mode", "performance")) if s.time_key else None
    return ctx[STREAM_ORDER]


def make_input(ctx: dict[str, Any], manifest: str) -> InputKind:
    """Each sample checked against the settings (parsed once), batched as keys then values and offsets per field,
    and played in time order when the input has a ``time_key``."""
    s = jagged_input(ctx, manifest)
    return InputKind(sample=lambda out, index: jagged_sample(out, index, s, manifest),
                     to_model=lambda cells: jagged_batch(cells, s), order=stream_order(ctx, manifest))
