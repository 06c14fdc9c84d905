"""Goodput: the rate of samples that meet every latency objective (SLO), counted sample by sample.

The per-sample times come from LoadGen's own trace (``mlperf_log_trace.json``, written when the run asks for it):

- a ``Sample`` event per completed sample, its ``args.complete_ns`` the sample's latency (scheduled to done);
- Server: a ``Token_Latency`` counter per first token, stamped with the query's scheduled time (the ``ts`` of the
  sample's ``Sample`` begin event); ``issue_delay + issue_to_done`` is the sample's time to first token (TTFT);
- Offline/SingleStream: a ``Token`` event per first token, keyed by the sample's sequence id like ``Sample``.

The time per output token (TPOT) of a sample is LoadGen's ``(latency - TTFT) / (tokens - 1)``; the token count
comes from the sample's accuracy-log entry (``token_count``) when LoadGen logged it, else from a manifest whose
generation length is fixed (``min_new_tokens == max_new_tokens``).

LoadGen writes the trace as Chrome trace events, one per line, but quotes some detail keys twice (the file is not
valid JSON as a whole): only the lines of the events above are parsed.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import MLHarnessError
from mlharness.fileguard import open_regular
from mlharness.report.treefiles import JSON_LIMIT, TreeFileError, present, read_json, shown

TRACE_FILE = "mlperf_log_trace.json"
METRICS = ("latency", "ttft", "tpot")
PERCENTILES = ("50", "90", "95", "99", "99.9")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_SLO = re.compile(r"^(latency|ttft|tpot)_p(\d+(?:\.\d+)?)$")
_VALUE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(ns|us|ms|s)$")
_EVENT_NAMES = ('"name":"Sample"', '"name":"Token"', '"name":"Token_Latency"')


@dataclass
class SampleTimes:
    """One completed sample: its latency, and for a token-stream model its TTFT and output tokens (seconds)."""

    seq: int
    latency_s: float
    ttft_s: float | None = None
    tokens: int | None = None

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.tokens is None or self.tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.tokens - 1)


def parse_slos(text: str | None) -> dict[str, float]:
    """``ttft_p99=500ms,tpot_p99=30ms`` -> {"ttft_p99": 0.5, "tpot_p99": 0.03} (seconds)."""
    slos: dict[str, float] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, eq, value = part.partition("=")
        name, value = name.strip(), value.strip().lower()
        m = _SLO.match(name)
        if not eq or m is None:
            raise MLHarnessError(f"--slo '{part}': expected NAME=VALUE with NAME one of "
                                 f"{', '.join(f'{x}_pNN' for x in METRICS)} (e.g. ttft_p99=500ms)")
        if m.group(2) not in PERCENTILES:
            raise MLHarnessError(f"--slo '{part}': percentile p{m.group(2)} is not one LoadGen reports "
                                 f"(p{', p'.join(PERCENTILES)})")
        v = _VALUE.match(value)
        if v is None:
            raise MLHarnessError(f"--slo '{part}': the value needs a unit, one of {', '.join(_UNITS)} (e.g. 20ms)")
        seconds = float(v.group(1)) * _UNITS[v.group(2)]
        if seconds <= 0:
            raise MLHarnessError(f"--slo '{part}': the bound must be above zero")
        if name in slos:
            raise MLHarnessError(f"--slo names {name} twice")
        slos[name] = seconds
    return slos


def slo_metric(name: str) -> str:
    return name.split("_p", 1)[0]


def _events(path: Path) -> list[dict]:
    events = []
    # streamed line by line (LoadGen's trace of a long run is large), from a regular file only
    with io.TextIOWrapper(open_regular(path, "LoadGen's trace", error=TreeFileError), errors="replace") as f:
        for line in f:
            if not any(n in line for n in _EVENT_NAMES):
                continue
            line = line.strip().rstrip(",")
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise MLHarnessError(f"{path}: a trace event LoadGen wrote could not be read: {e}") from e
    return events


def token_counts(outdir: Path) -> dict[int, int]:
    """seq id -> token_count of the accuracy-log entries LoadGen wrote (in performance mode: the sampled ones)."""
    path = outdir / "mlperf_log_accuracy.json"
    if not present(path, "LoadGen's accuracy log") or path.stat().st_size == 0:
        return {}
    entries = read_json(path, "LoadGen's accuracy log", JSON_LIMIT, shape=[{"seq_id": (int,), "token_count": (int,)}])
    return {e["seq_id"]: e["token_count"] for e in entries if isinstance(e, dict) and "token_count" in e and
            "seq_id" in e}


def sample_times(outdir: Path, fixed_tokens: int | None = None) -> list[SampleTimes]:
    """Every completed sample of the run in ``outdir``, from LoadGen's trace."""
    path = outdir / TRACE_FILE
    if not present(path, "LoadGen's trace"):
        raise MLHarnessError(f"{shown(outdir)}: no {TRACE_FILE}: the run was not asked for LoadGen's trace")
    samples: dict[int, SampleTimes] = {}
    scheduled: dict[str, int] = {}  # the ts of a sample's begin event (its query's scheduled time) -> seq id
    first_by_seq: dict[int, float] = {}
    first_by_ts: dict[str, list[float]] = {}
    for ev in _events(path):
        name, args = ev.get("name"), ev.get("args") or {}
        if name == "Sample" and ev.get("ph") == "b":
            seq = int(args["sample_seq"])
            samples[seq] = SampleTimes(seq, int(args["complete_ns"]) * 1e-9)
            scheduled[f"{float(ev['ts']):.3f}"] = seq
        elif name == "Token" and ev.get("ph") == "b":
            first_by_seq[int(args["sample_seq"])] = int(args["complete_ns"]) * 1e-9
        elif name == "Token_Latency":
            ttft = (int(args["issue_delay"]) + int(args["issue_to_done"])) * 1e-9
            first_by_ts.setdefault(f"{float(ev['ts']):.3f}", []).append(ttft)
    for ts, values in first_by_ts.items():
        if ts in scheduled and len(values) == 1:
            first_by_seq.setdefault(scheduled[ts], values[0])
    counts = token_counts(outdir)
    for seq, s in samples.items():
        s.ttft_s = first_by_seq.get(seq)
        s.tokens = counts.get(seq, fixed_tokens)
    return [samples[k] for k in sorted(samples)]


def meets(sample: SampleTimes, slos: dict[str, float]) -> bool:
    """Whether one sample meets every objective; a figure the sample lacks is an error (the SLO cannot be judged)."""
    for name, bound in slos.items():
        metric = slo_metric(name)
        value = {"latency": sample.latency_s, "ttft": sample.ttft_s, "tpot": sample.tpot_s}[metric]
        if value is None:
            why = ("the run measured no first tokens" if metric == "ttft" else
                   "the per-sample output token counts are unknown (no accuracy-log entry and no fixed "
                   "generation length)")
            raise MLHarnessError(f"--slo {name}: sample {sample.seq} has no {metric.upper()}: {why}")
        if value > bound:
            return False
    return True


def goodput(outdir: Path, slos: dict[str, float], throughput: float | None,
            fixed_tokens: int | None = None) -> tuple[float | None, float | None, int, int]:
    """(goodput in samples/s, fraction of samples meeting every SLO, good count, total count).

    Goodput is the run's throughput as LoadGen states it times the fraction of its samples that met every SLO,
    so a run whose samples all meet them has goodput == throughput. Without SLOs: (None, None, 0, total)."""
    samples = sample_times(outdir, fixed_tokens)
    if not slos:
        return None, None, 0, len(samples)
    if not samples:
        raise MLHarnessError(f"{outdir / TRACE_FILE}: no completed samples in LoadGen's trace")
    good = sum(1 for s in samples if meets(s, slos))
    fraction = good / len(samples)
    return (None if throughput is None else throughput * fraction), fraction, good, len(samples)
