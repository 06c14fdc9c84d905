"""Per-stage spans in the Chrome trace event format (loads in chrome://tracing and Perfetto).

Levels: ``none`` (no tracer object exists, nothing is recorded), ``model`` (spans per batch and per sample in the
SUT and at load time), ``framework`` (adds the framework's own profiler, merged into the same timeline),
``system`` (adds host/GPU counters), ``full`` (all of it plus LoadGen's own trace). Recording appends a tuple
to a per-thread list: no lock and no formatting in the timed path; the JSON is written after the run.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

LEVELS = ("none", "model", "framework", "system", "full")


def level_at_least(level: str, wanted: str) -> bool:
    return LEVELS.index(level) >= LEVELS.index(wanted)


class Tracer:
    """Collects complete spans ("X" events), counters ("C") and instant events; ``write`` saves them."""

    def __init__(self, level: str = "model"):
        if level not in LEVELS or level == "none":
            raise ValueError(f"trace level '{level}': expected one of {', '.join(LEVELS[1:])}")
        self.level = level
        self.pid = os.getpid()
        self.t0_ns = time.perf_counter_ns()
        self._local = threading.local()
        self._lists: list[list[tuple]] = []
        self._lists_lock = threading.Lock()
        self._thread_names: dict[int, str] = {}
        # OS thread id -> Python ident of every recording thread: framework profilers stamp events with OS ids,
        # and mapping them puts a framework's operators on the same timeline row as the span that called them
        self.native_ids: dict[int, int] = {}
        self.extra_events: list[dict[str, Any]] = []  # already-formatted events (framework profilers, counters)

    def _events(self) -> list[tuple]:
        events = getattr(self._local, "events", None)
        if events is None:
            events = self._local.events = []
            with self._lists_lock:
                self._lists.append(events)
                t = threading.current_thread()
                self._thread_names[t.ident or 0] = t.name
                if t.native_id is not None:
                    self.native_ids[t.native_id] = t.ident or 0
        return events

    @staticmethod
    def now() -> int:
        return time.perf_counter_ns()

    def span(self, name: str, cat: str, start_ns: int, end_ns: int, args: dict[str, Any] | None = None) -> None:
        self._events().append(("X", name, cat, start_ns, end_ns, threading.get_ident(), args))

    def counter(self, name: str, values: dict[str, float], at_ns: int | None = None) -> None:
        self._events().append(("C", name, "system", at_ns or time.perf_counter_ns(), 0, 0, values))

    def to_us(self, ns: int) -> float:
        return (ns - self.t0_ns) / 1000.0

    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for tid, name in self._thread_names.items():
            out.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid, "args": {"name": name}})
        with self._lists_lock:
            lists = list(self._lists)
        for events in lists:
            for ph, name, cat, start, end, tid, args in list(events):
                ev: dict[str, Any] = {"name": name, "cat": cat, "ph": ph, "ts": self.to_us(start), "pid": self.pid,
                                      "tid": tid}
                if ph == "X":
                    ev["dur"] = (end - start) / 1000.0
                if args:
                    ev["args"] = args
                out.append(ev)
        out.extend(self.extra_events)
        return out

    def write(self, path: Path, metadata: dict[str, Any] | None = None) -> Path:
        doc = {"traceEvents": self.events(), "displayTimeUnit": "ms",
               "otherData": {"generator": "mlharness", "trace_level": self.level, **(metadata or {})}}
        path.write_text(json.dumps(doc))
        return path


def make_tracer(level: str | None) -> Tracer | None:
    if level in (None, "", "none"):
        return None
    return Tracer(level)
