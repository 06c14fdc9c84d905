"""A sweep of session replays as a load sweep: each point's figures over sessions, the knee and the highest VALID
point, written as the ``sweep.json`` the report reads (``mlharness-sweep`` version 1, as ``mlharness sweep``
writes) and as ``sweep_sessions.json`` (each point's run folder and whole ``sessions_summary.json``).

A point is one run (:func:`mlharness.measurement.replay.replay` drives them): a session rate (Server, the
``session_rate`` axis) or a bound on the sessions in flight (Offline, ``session_concurrency``). Its throughput is
sessions per second (LoadGen's, as ``mlharness sweep`` states a point's; the player's count over the test's wall
time in accuracy mode), its turns per second that rate times the turns a session played on average, its latency a
session's end to end (the player's p50/p90/p99), its TTFT and TPOT those of every turn, and its goodput the share of
sessions whose every turn (and whole length) met the ``--slo-*-ms`` flags, as a fraction and as that share of the
throughput. The knee and the highest VALID value follow the rules of ``mlharness sweep``
(:mod:`mlharness.measurement.sweep_plan`): on the rate axis, throughput no longer following the offered rate or the
p99 risen steeply; on the concurrency axis, throughput no longer growing with the sessions in flight. A rate point
of fewer sessions than LoadGen's early stopping needs for a p99 is shown but never named as either; a point played
in accuracy mode (every session once) has no LoadGen verdict and is never VALID.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mlharness.measurement import sweep_plan as sp
from mlharness.measurement.sweep import KIND, MIN_POINT_QUERIES, SWEEP_FILE, VERSION, summary_figures

SESSIONS_FILE = "sweep_sessions.json"
RATE_AXIS, CONCURRENCY_AXIS = "session_rate", "session_concurrency"
KNEE_AXIS = {RATE_AXIS: "target_qps", CONCURRENCY_AXIS: "concurrency"}  # sweep_plan's rule of each axis
# the session service levels (milliseconds, the replay flags) under the names sweep.json states them (seconds)
SLO_NAMES = {"slo_ttft_ms": "ttft_every_turn", "slo_tpot_ms": "tpot_every_turn", "slo_session_ms": "session"}
ACCURACY_MODE = "accuracy mode: every session played once, LoadGen judges no performance"


def _pcts(d: dict[str, Any] | None) -> dict[str, float] | None:
    return None if not d else {k: float(d[k]) for k in ("p50", "p90", "p99") if d.get(k) is not None}


def point_figures(label: str, value: float, axis: str, folder: Path, root: Path, result: Any,
                  summary: dict[str, Any], mode: str) -> dict[str, Any]:
    """One point of ``sweep.json`` from its run (``result``: the runner's) and its ``sessions_summary.json``."""
    perf = mode == "performance"
    lg = summary_figures(result.summary) if result.summary is not None else None
    valid = bool(perf and result.summary is not None and result.summary.valid)
    reasons = [] if valid else (lg["invalid_reasons"] if perf and lg else [ACCURACY_MODE])
    # VALID under the round's rules where LoadGen's line reads INVALID (qwen3.6-27b's early stopping): why
    waived = ((getattr(result, "metadata", None) or {}).get("result") or {}).get("waived") if valid else None
    minimum = MIN_POINT_QUERIES if perf and axis == RATE_AXIS else None
    g = summary["goodput"]
    # as mlharness sweep states it: LoadGen's throughput where it measured the run (the player's sessions over the
    # test's wall time otherwise), and goodput that throughput times the share of sessions within every SLO
    throughput = (lg["throughput"] if perf and lg and lg["throughput"] is not None else summary["sessions_per_s"])
    fraction = g["fraction"]
    # turns at the same clock as the sessions: the sessions' rate times the turns each played on average
    per_session = summary["turns"] / summary["sessions_ok"] if summary["sessions_ok"] else None
    turns_rate = None if throughput is None or per_session is None else throughput * per_session
    return {
        "label": label, "value": value, "repeat": 1, "dir": os.path.relpath(folder, root), "valid": valid,
        "waived": waived,
        "invalid_reasons": reasons, "constraints_met": bool(lg["constraints_met"]) if perf and lg else valid,
        "throughput": throughput, "sessions_per_s": throughput, "turns_per_s": turns_rate,
        "player_sessions_per_s": summary["sessions_per_s"],
        "latency_ms": _pcts(summary["session_latency_ms"]), "ttft_ms": _pcts(summary["turn"]["ttft_ms"]),
        "tpot_ms": _pcts(summary["turn"]["tpot_ms"]), "tokens_per_s": None, "tokens_per_s_per_user": None,
        "goodput": None if throughput is None or fraction is None else throughput * fraction,
        "goodput_fraction": fraction, "good_sessions": g["good_sessions"],
        "sessions": summary["sessions"], "sessions_ok": summary["sessions_ok"], "turns": summary["turns"],
        "samples": summary["sessions"], "good_samples": g["good_sessions"], "min_queries": minimum,
        "meaningful": minimum is None or summary["sessions"] >= minimum, "slo_met": {},
    }


def sweep_state(trace: Path, scenario: str, axis: str, mode: str, slo_ms: dict[str, float],
                points: list[dict[str, Any]], options: dict[str, Any], complete: bool) -> dict[str, Any]:
    """The whole ``sweep.json`` of the points so far."""
    pts = sorted(points, key=lambda p: (p["value"], p["repeat"]))
    aggs = sp.by_value(pts)
    return {"kind": KIND, "version": VERSION, "manifest": f"session replay of {trace}", "trace": str(trace),
            "scenario": scenario, "axis": axis, "mode": mode, "plan": "list",
            "slo": {SLO_NAMES[k]: v / 1000.0 for k, v in slo_ms.items() if k in SLO_NAMES}, "session_slo_ms": slo_ms,
            "options": options, "points": pts, "aggregates": aggs, "knee": sp.find_knee(aggs, KNEE_AXIS[axis]),
            "max_valid": sp.max_valid(aggs), "complete": complete}


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def write_sweep(root: Path, state: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """``sweep.json`` and ``sweep_sessions.json`` in ``root``, rewritten after each point."""
    _write(root / SWEEP_FILE, state)
    _write(root / SESSIONS_FILE, {"trace": state["trace"], "scenario": state["scenario"], "axis": state["axis"],
                                  "mode": state["mode"], "points": runs})
