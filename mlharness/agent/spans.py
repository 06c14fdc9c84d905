"""The agent's spans in the run's one trace (``--trace`` with ``--agent``).

A traced run marks each ModelInfer request with the parameter :data:`TRACE_PARAMETER`. The agent times what it
did for that request on its own clock: the whole request, the wait for a batch, the batch's run and, with
``--hooks agent``, the pipeline's stages (gather, predict, postprocess) within it, and returns them as JSON text
in the response parameter of that name, as offsets from the request's arrival. The client maps them onto its
tracer's clock with the request's round trip: the agent's handling time ``D`` sits in the middle of the round
trip ``R`` measured by the client, so the arrival is at ``send + (R - D) / 2`` (the network taken as
symmetric; spans are off by at most half the asymmetry). Each agent is one process row in the trace, named by
its address, host and pid; concurrent requests are spread over lanes so that spans nest.

The agent's answer is untrusted: it is size-bounded, parsed as JSON data only, and any span that is not a
well-formed ``[name, offset, duration]`` inside the request's own handling time is dropped.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

EXTENSION_TRACE = "mlharness_trace"
TRACE_PARAMETER = "mlharness_trace"
MAX_SPANS_BYTES = 16 * 1024
MAX_SPANS = 64
AGENT_PID_BASE = 10_000_000  # trace pids of agents: apart from real pids, the harness's own is one of those
Timing = tuple[int, int, int, list[tuple[str, int, int]]]  # run start, run end (ns), batch samples, stage spans


class StageCollector:
    """A tracer-shaped recorder given to the agent's pipeline: the stage spans of the calling thread, taken by
    the batcher right after each batch it runs (on the same thread)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.level = "model"

    @staticmethod
    def now() -> int:
        return time.perf_counter_ns()

    def span(self, name: str, cat: str, start_ns: int, end_ns: int, args: dict[str, Any] | None = None) -> None:
        spans = getattr(self._local, "spans", None)
        if spans is None:
            spans = self._local.spans = []
        spans.append((name, start_ns, end_ns))

    def take(self) -> list[tuple[str, int, int]]:
        spans = getattr(self._local, "spans", None) or []
        self._local.spans = []
        return spans


def request_spans(arrived_ns: int, done_ns: int, timings: list[Timing]) -> str:
    """The agent's answer for one request: its handling time and spans as offsets from its arrival."""
    spans: list[list[Any]] = [["agent.request", 0, done_ns - arrived_ns]]
    if timings:
        first = min(t[0] for t in timings)
        spans.append(["agent.queue", 0, max(0, first - arrived_ns)])
    for start, end, samples, stages in timings:
        spans.append(["agent.run", start - arrived_ns, end - start, {"batch_samples": samples}])
        spans.extend([f"agent.{name}", s - arrived_ns, e - s] for name, s, e in stages)
    return json.dumps({"d": done_ns - arrived_ns, "s": spans[:MAX_SPANS]})


def _parse(text: str) -> tuple[int, list[tuple[str, int, int, dict[str, Any] | None]]]:
    if len(text) > MAX_SPANS_BYTES:
        raise ValueError(f"{len(text)} characters of spans, more than the {MAX_SPANS_BYTES} accepted")
    data = json.loads(text)
    d = data.get("d") if isinstance(data, dict) else None
    raw = data.get("s") if isinstance(data, dict) else None
    if not isinstance(d, int) or isinstance(d, bool) or d < 0 or not isinstance(raw, list):
        raise ValueError("not an object with an integer 'd' and a list 's'")
    spans = []
    for item in raw[:MAX_SPANS]:
        if not (isinstance(item, list) and len(item) in (3, 4) and isinstance(item[0], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in item[1:3])):
            continue
        name, offset, duration = item[0][:64], item[1], item[2]
        args = item[3] if len(item) == 4 and isinstance(item[3], dict) else None
        if 0 <= offset and 0 <= duration and offset + duration <= d:
            spans.append((name, offset, duration, {str(k)[:64]: v for k, v in list(args.items())[:8]
                                                   if isinstance(v, int | float | str)} if args else None))
    return d, spans


class SpanMerger:
    """Collects the agents' answers during the run (from gRPC threads) and writes them onto the tracer."""

    def __init__(self, addresses: list[str]):
        self.addresses = addresses
        self._requests: list[tuple[str, int, int, str]] = []  # address, send, receive (ns), answer
        self.dropped = 0

    def add(self, address: str, sent_ns: int, received_ns: int, text: str) -> None:
        self._requests.append((address, sent_ns, received_ns, text))  # list.append: atomic, no lock

    def events(self, tracer: Any, names: dict[str, str]) -> list[dict[str, Any]]:
        """Chrome trace events: one process per agent (``names``: address -> its label), lanes as threads."""
        pids = {a: AGENT_PID_BASE + k for k, a in enumerate(self.addresses)}
        lanes: dict[str, list[int]] = {a: [] for a in self.addresses}  # per agent: when each lane is free
        out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                                      "args": {"name": names.get(a, f"agent {a}")}} for a, pid in pids.items()]
        for address, sent, received, text in sorted(self._requests, key=lambda r: r[1]):
            if address not in pids:
                continue
            try:
                d, spans = _parse(text)
            except (ValueError, RecursionError) as e:
                self.dropped += 1
                if self.dropped == 1:
                    log.warning("agent %s: its trace spans are malformed and left out (%s)", address, e)
                continue
            base = sent + max(0, (received - sent - d) // 2)
            free = lanes[address]
            lane = next((i for i, t in enumerate(free) if t <= base), len(free))
            if lane == len(free):
                free.append(0)
            free[lane] = base + d
            for name, offset, duration, args in spans:
                ev: dict[str, Any] = {"name": name, "cat": "agent", "ph": "X", "ts": tracer.to_us(base + offset),
                                      "dur": duration / 1000.0, "pid": pids[address], "tid": lane}
                if args:
                    ev["args"] = args
                out.append(ev)
        return out
