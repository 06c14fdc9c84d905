"""Framework profiler output → Chrome trace events on the tracer's clock.

Each framework stamps its profile with its own clock: ONNX Runtime with microseconds since the session's
profiling start (``get_profiling_start_time_ns``, wall-clock time on Linux), PyTorch's Kineto events with
wall-clock nanoseconds, TensorFlow's XSpace with offsets from ``profile_start_time`` (wall clock). The tracer
uses ``time.perf_counter_ns``. :class:`ClockAlign` maps a wall-clock or monotonic timestamp onto perf_counter
by pairing readings of the clocks taken back to back; which clock a framework used is decided by which one the
timestamp is closest to, so a platform that stamps with the monotonic clock is handled too.

Converted events follow one convention the per-layer breakdown relies on: operator events have
``cat == "framework.op"`` and ``args.op_type`` (plus ``args.shapes`` when the framework records input shapes);
everything else (sessions, runs, nested calls inside an operator) has ``cat == "framework"``.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

OP_CAT = "framework.op"
OTHER_CAT = "framework"

# ONNX Runtime node args worth keeping in the trace (the rest, e.g. thread scheduling stats, only bloat it)
_ORT_KEEP = ("op_name", "provider", "node_index", "activation_size", "parameter_size", "output_size")


class ClockAlign:
    """Back-to-back readings of the wall, monotonic and perf_counter clocks, for converting timestamps.

    Take one snapshot when profiling starts and another (``mark``) when it stops: wall-clock timestamps are
    then mapped piecewise-linearly, which absorbs an NTP slew of the wall clock during a long run.
    """

    def __init__(self) -> None:
        self.points: list[tuple[int, int, int]] = []  # (wall, monotonic, perf_counter) nanoseconds
        self.mark()

    def mark(self) -> None:
        # perf_counter on both sides of the other reads, midpoint taken: the pairing error is half the
        # (sub-microsecond) time the reads take
        p0 = time.perf_counter_ns()
        wall = time.time_ns()
        mono = time.monotonic_ns()
        p1 = time.perf_counter_ns()
        self.points.append((wall, mono, (p0 + p1) // 2))

    @property
    def perf_ns(self) -> int:
        return self.points[0][2]

    def to_perf_ns(self, ts_ns: int) -> int:
        """A wall-clock or monotonic nanosecond timestamp on the perf_counter clock."""
        w0, m0, p0 = self.points[0]
        if abs(ts_ns - w0) > abs(ts_ns - m0):
            return ts_ns - m0 + p0  # monotonic: ticks with perf_counter, a constant offset
        pts = sorted(self.points)
        if len(pts) == 1:
            return ts_ns - w0 + p0
        i = max(1, min(len(pts) - 1, bisect.bisect_left([p[0] for p in pts], ts_ns)))
        (wa, _, pa), (wb, _, pb) = pts[i - 1], pts[i]
        if wb == wa:
            return ts_ns - wa + pa
        return pa + round((ts_ns - wa) * (pb - pa) / (wb - wa))


class SharedProfiler:
    """A process-wide profiler (torch.profiler, TensorFlow's) shared by every predictor instance of a run:
    the first ``start`` starts it, the last ``stop`` stops it and gets its events; the others get none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._handle: Any = None
        self.align: ClockAlign | None = None

    def start(self, begin: Callable[[], Any]) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1:
                self.align = ClockAlign()
                try:
                    self._handle = begin()
                except Exception as e:  # noqa: BLE001 - diagnostics must never fail the run
                    log.warning("the framework profiler did not start: %s", e)
                    self._handle = None

    def stop(self, end: Callable[[Any, ClockAlign], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        with self._lock:
            if self._users == 0:
                return []
            self._users -= 1
            if self._users > 0 or self._handle is None or self.align is None:
                return []
            handle, self._handle = self._handle, None
            self.align.mark()
            try:
                return end(handle, self.align)
            except Exception as e:  # noqa: BLE001
                log.warning("the framework profile could not be collected: %s", e)
                return []


def _shapes_of_ort(args: dict[str, Any]) -> list[list[int]]:
    shapes = []
    for entry in args.get("input_type_shape") or []:
        if isinstance(entry, dict):
            for dims in entry.values():
                shapes.append([int(d) for d in dims] if isinstance(dims, list) else [])
    return shapes


def ort_events(profile: Iterable[dict[str, Any]], start_ns: int, align: ClockAlign, t0_ns: int, pid: int,
               since_ns: int | None = None, tid_map: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """ONNX Runtime's profile (the list in the JSON file ``end_profiling`` wrote). ``start_ns``: the session's
    ``get_profiling_start_time_ns()``; ``t0_ns``: the tracer's origin; events before ``since_ns``
    (perf_counter clock: session loading, ...) are dropped; ``tid_map``: OS thread id -> the tracer's thread
    id (``Tracer.native_ids``), so operators land on the row of the SUT worker that ran them."""
    tid_map = tid_map or {}
    base = align.to_perf_ns(start_ns)
    out: list[dict[str, Any]] = []
    for ev in profile:
        if ev.get("ph") != "X" or "ts" not in ev:
            continue
        start = base + int(float(ev["ts"]) * 1000)
        if since_ns is not None and start < since_ns:
            continue
        raw = ev.get("args") or {}
        os_tid = int(ev.get("tid", 0))
        is_op = ev.get("cat") == "Node" and "op_name" in raw
        args: dict[str, Any] = {"framework": "onnxruntime"}
        if is_op:
            args.update({k: raw[k] for k in _ORT_KEEP if k in raw})
            args["op_type"] = raw["op_name"]
            args["shapes"] = _shapes_of_ort(raw)
        name = str(ev.get("name", "?"))
        out.append({"name": name.removesuffix("_kernel_time") if is_op else name, "cat": OP_CAT if is_op else
                    OTHER_CAT, "ph": "X", "ts": (start - t0_ns) / 1000.0, "dur": float(ev.get("dur", 0)),
                    "pid": pid, "tid": tid_map.get(os_tid, os_tid), "args": args})
    return out


def torch_events(kineto: Iterable[Any], align: ClockAlign, t0_ns: int, pid: int,
                 since_ns: int | None = None) -> list[dict[str, Any]]:
    """PyTorch profiler events (``prof.profiler.kineto_results.events()``): CPU operators with their input
    shapes, and device kernels when CUDA was profiled."""
    out: list[dict[str, Any]] = []
    for ev in kineto:
        start = align.to_perf_ns(int(ev.start_ns()))
        if since_ns is not None and start < since_ns:
            continue
        name = ev.name()
        device = str(ev.device_type()).rpartition(".")[2].lower()
        args: dict[str, Any] = {"framework": "pytorch", "device": device}
        # operators, not the TorchScript methods (scope 2) or user ranges (7) that enclose them
        is_op = device == "cpu" and _scope(ev) not in (2, 7)
        if is_op:
            args["op_type"] = name
            args["shapes"] = [list(s) for s in ev.shapes() if len(s) > 0]
        out.append({"name": name, "cat": OP_CAT if is_op else OTHER_CAT, "ph": "X",
                    "ts": (start - t0_ns) / 1000.0, "dur": ev.duration_ns() / 1000.0, "pid": pid,
                    "tid": int(ev.start_thread_id()) if device == "cpu" else _device_tid(ev), "args": args})
    mark_nested(out)
    return out


def tf_events(xspace_bytes: bytes, align: ClockAlign, t0_ns: int, pid: int,
              since_ns: int | None = None, tid_map: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """TensorFlow's profile (an ``XSpace`` protobuf, the ``*.xplane.pb`` file the profiler writes): the host
    plane's TraceMe events. Operator events are named ``scope/node:OpType``; their type is the event's display
    name. TensorFlow records no input shapes on host events, so layers are grouped by node name instead."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    tid_map = tid_map or {}
    space = xplane_pb2.XSpace()
    space.ParseFromString(xspace_bytes)
    start_ns = None
    for plane in space.planes:
        for stat in plane.stats:
            if plane.stat_metadata[stat.metadata_id].name == "profile_start_time":
                start_ns = int(stat.uint64_value or stat.int64_value)
    base = align.to_perf_ns(start_ns) if start_ns else align.perf_ns
    out: list[dict[str, Any]] = []
    for p, plane in enumerate(space.planes):
        if not plane.name.startswith(("/host:", "/device:")):
            continue
        for k, line in enumerate(plane.lines):
            # host lines are OS threads; device lines (streams) get synthetic ids (viewers want integers)
            host = plane.name.startswith("/host:")
            tid = tid_map.get(int(line.id), int(line.id)) if host else 10**9 + p * 10**6 + k
            for ev in line.events:
                md = plane.event_metadata[ev.metadata_id]
                if ev.duration_ps == 0:
                    continue  # thread-pool bookkeeping markers
                start = base + line.timestamp_ns + ev.offset_ps // 1000
                if since_ns is not None and start < since_ns:
                    continue
                is_op = bool(md.display_name) and ":" in md.name
                args: dict[str, Any] = {"framework": "tensorflow"}
                if is_op:
                    args["op_type"] = md.display_name
                    args["node"] = md.name.rpartition(":")[0]
                out.append({"name": md.name, "cat": OP_CAT if is_op else OTHER_CAT, "ph": "X",
                            "ts": (start - t0_ns) / 1000.0, "dur": ev.duration_ps / 1e6, "pid": pid,
                            "tid": tid, "args": args})
    mark_nested(out)
    return out


def _scope(ev: Any) -> int:
    """at::RecordScope of a Kineto event (0 for ATen operators); 0 when this torch does not say."""
    try:
        return int(ev.scope())
    except (AttributeError, TypeError, ValueError):
        return 0


def _device_tid(ev: Any) -> int:
    """Chrome trace viewers want integer thread ids: one synthetic row per device and stream."""
    try:
        stream = int(ev.device_resource_id())
    except (AttributeError, TypeError, ValueError):
        stream = 0
    return 10**9 + int(ev.device_index()) * 10**6 + stream


def mark_nested(events: list[dict[str, Any]]) -> None:
    """Demote operator events that lie inside another operator on the same thread (aten::conv2d calls
    aten::convolution, a TF function call runs its body's ops) to ``framework``, so that summing the
    ``framework.op`` events counts every moment once."""
    per_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for ev in events:
        if ev["cat"] == OP_CAT:
            per_tid[ev["tid"]].append(ev)
    eps = 1e-3
    for evs in per_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_end = float("-inf")
        for ev in evs:
            end = ev["ts"] + ev["dur"]
            if ev["ts"] < open_end - eps:
                ev["cat"] = OTHER_CAT
                ev["args"]["nested"] = True
            else:
                open_end = end


def thread_names(events: list[dict[str, Any]], label: str, pid: int,
                 named: Iterable[int] = ()) -> list[dict[str, Any]]:
    """Chrome metadata naming the framework's own threads (not those in ``named``: the tracer names its own),
    so the timeline says whose rows they are."""
    tids = sorted({e["tid"] for e in events} - set(named))
    return [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"{label} {tid}"}}
            for tid in tids]
