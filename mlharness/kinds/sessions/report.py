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

from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError
from mlharness.fileguard import read_json
from mlharness.kinds.sessions.records import SessionRecord, TurnRecord

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


def ms_text(ms: float) -> str:
    """Milliseconds as the terminal shows them: one decimal, three significant digits below 1 ms (a local oracle's
    turns take microseconds, which one decimal would print as 0.0)."""
    return f"{ms:,.1f}" if ms >= 1 else f"{ms:.3g}"


def terminal_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The lines ``mlharness run`` prints under its result for a session run: what LoadGen's one-sample-per-session
    figures do not say (the sessions' outcome, the turns' latencies, the prompt share the server's cache served,
    the goodput against the service levels given), each only where the run measured it."""

    def p90(d: dict[str, Any] | None) -> str | None:
        return None if not d or d.get("p90") is None else f"p90 {ms_text(d['p90'])} ms"

    rows = [("sessions", f"{summary['sessions_ok']} ok, {summary['sessions_failed']} failed, "
                         f"{summary['turns']} turns")]
    if p90(summary.get("session_latency_ms")):
        rows.append(("session latency", p90(summary["session_latency_ms"])))
    turn = summary.get("turn") or {}
    latencies = [f"{name} {text}" for name, text in (("TTFT", p90(turn.get("ttft_ms"))),
                                                       ("TPOT", p90(turn.get("tpot_ms")))) if text]
    if latencies:
        rows.append(("per turn", ", ".join(latencies)))
    server = summary.get("server_cache")
    shares = [f"{who} {rate:.1%}" for who, rate in (
        ("client", summary.get("client_hit_rate")),
        ("server", server.get("hit_rate") if isinstance(server, dict) else None)) if rate is not None]
    if shares:
        rows.append(("cached prompt share", ", ".join(shares)))
    slo, good = summary.get("slo") or {}, summary.get("goodput") or {}
    if slo and good.get("fraction") is not None:
        rate = good.get("sessions_per_s")
        rows.append(("goodput", f"{good['good_sessions']} of {summary['sessions']} sessions ({good['fraction']:.0%})"
                                + ("" if rate is None else f", {rate:.3g} sessions/s") + " within "
                                + ", ".join(f"{k} {v:g}" for k, v in sorted(slo.items()))))
    return rows


def session_rows(outdir: Path) -> list[tuple[str, str]]:
    """:func:`terminal_rows` of a run folder's ``sessions_summary.json`` (none where it cannot be read)."""
    try:
        return terminal_rows(read_json(Path(outdir) / SUMMARY_FILE, "sessions summary", allow_nan=True))
    except (MLHarnessError, OSError, ValueError, KeyError, TypeError):
        return []
