"""The figures of a session run beside LoadGen's: ``sessions_summary.json``, computed from the run's
``sessions.jsonl`` records (:func:`summarize`), and read by the report's per-turn curves.

LoadGen measures a session end to end (one sample); the turns inside are the player's records: TTFT, TPOT and
latency per turn, overall and per turn index (the curves show how a growing history slows the later turns), the
client's prefix-cache hit rate (the sum of ``cached_tokens`` over the sum of ``prompt_tokens`` of the turns whose
server reported both), and the goodput over sessions: the sessions whose every turn meets ``slo_ttft_ms`` and
``slo_tpot_ms`` and whose end-to-end latency meets ``slo_session_ms`` (those given), as a fraction of the sessions
played and as a rate over the run's wall time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlharness.sessions.records import SessionRecord, TurnRecord

SUMMARY_FILE = "sessions_summary.json"
PERCENTILES = (50, 90, 99)


def pcts_ms(values: list[float]) -> dict[str, float] | None:
    """p50/p90/p99 and the mean of seconds, in milliseconds; None for no values."""
    if not values:
        return None
    arr = np.asarray(values, dtype=np.float64) * 1e3
    out = {f"p{p}": float(np.percentile(arr, p)) for p in PERCENTILES}
    out["mean"] = float(arr.mean())
    return out


def _turn_figures(turns: list[TurnRecord]) -> dict[str, Any]:
    done = [t for t in turns if t.error is None and t.done is not None]
    prompt = [t for t in done if t.prompt_tokens and t.cached_tokens is not None]
    return {
        "turns": len(done),
        "ttft_ms": pcts_ms([t.ttft_s for t in done if t.ttft_s is not None]),
        "tpot_ms": pcts_ms([t.tpot_s for t in done if t.tpot_s is not None]),
        "latency_ms": pcts_ms([t.latency_s for t in done if t.latency_s is not None]),
        "prompt_tokens": sum(t.prompt_tokens or 0 for t in done),
        "completion_tokens": sum(t.completion_tokens or 0 for t in done),
        "cached_share": (sum(t.cached_tokens or 0 for t in prompt) / sum(t.prompt_tokens for t in prompt)
                         if prompt else None),
        "diverged": sum(1 for t in done if t.diverged),
    }


def meets(record: SessionRecord, slo: dict[str, float]) -> bool:
    """The session ended well and every turn, and its end-to-end latency, met the service levels given."""
    if not record.ok:
        return False
    ttft, tpot, whole = slo.get("slo_ttft_ms"), slo.get("slo_tpot_ms"), slo.get("slo_session_ms")
    for t in record.turns:
        if ttft is not None and (t.ttft_s is None or t.ttft_s * 1e3 > ttft):
            return False
        if tpot is not None and t.tpot_s is not None and t.tpot_s * 1e3 > tpot:
            return False
    return whole is None or (record.latency_s is not None and record.latency_s * 1e3 <= whole)


def summarize(records: list[SessionRecord], slo: dict[str, float] | None = None, wall_s: float | None = None,
              scenario: str | None = None, server_cache: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's session figures (``sessions_summary.json``). ``wall_s``: LoadGen's test from start to end (else
    the first session's start to the last one's end)."""
    slo = dict(slo or {})
    ok = [r for r in records if r.ok]
    turns = [t for r in records for t in r.turns]
    if wall_s is None and records:
        ends = [r.finished for r in records if r.finished is not None]
        wall_s = (max(ends) - min(r.started for r in records)) if ends else None
    by_index: dict[int, list[TurnRecord]] = {}
    for t in turns:
        by_index.setdefault(t.turn, []).append(t)
    overall = _turn_figures(turns)
    good = [r for r in ok if meets(r, slo)]

    def rate(n: int) -> float | None:
        return n / wall_s if wall_s else None

    return {
        "scenario": scenario,
        "sessions": len(records),
        "sessions_ok": len(ok),
        "sessions_failed": len(records) - len(ok),
        "failures": [{"session": r.session, "index": r.index, "error": r.error} for r in records if not r.ok][:20],
        "wall_s": wall_s,
        "session_latency_ms": pcts_ms([r.latency_s for r in ok if r.latency_s is not None]),
        "turns": overall["turns"],
        "turn": overall,
        "per_turn": [{"turn": k, **_turn_figures(by_index[k])} for k in sorted(by_index)],
        "sessions_per_s": rate(len(ok)),
        "turns_per_s": rate(overall["turns"]),
        "client_hit_rate": overall["cached_share"],
        "server_cache": server_cache,
        "slo": slo,
        "goodput": {"good_sessions": len(good), "fraction": len(good) / len(records) if records else None,
                    "sessions_per_s": rate(len(good))},
    }
