"""The report's section for session runs (a run folder with ``sessions.jsonl``): per-turn curves and the session
summary table.

LoadGen measures a session end to end; what happens inside it is in the player's records. The curves show each
turn index's TTFT, TPOT and latency (p50 and p90 over the sessions that reached that turn) and the share of its
prompt tokens the server's prefix cache served: a growing history makes later turns' prompts longer, and a cache
that keeps a session's prefix makes them cheap. The figures come from ``sessions.jsonl`` itself
(:func:`mlharness.kinds.sessions.report.summarize`), so a report of copied folders needs nothing else.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from mlharness.kinds.sessions.records import read_records
from mlharness.kinds.sessions.report import SUMMARY_FILE, summarize
from mlharness.report.plots import LEGEND_OUTSIDE, figure, plain, svg
from mlharness.report.treefiles import read_optional_json

RECORDS_FILE = "sessions.jsonl"
CURVES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("latency_ms", "turn latency"))
COLUMNS = ("run", "sessions ok", "failed", "session p50 / p90 / p99 ms", "turns", "TTFT p50 / p99 ms",
           "TPOT p50 / p99 ms", "sessions/s", "turns/s", "client cache hits", "server cache hits", "goodput")


def load(path: Path) -> dict[str, Any] | None:
    """The session summary of a run folder, from its records, with what the records alone cannot tell (the
    servers' cache counters, LoadGen's wall time, the SLOs) from the run's own summary; None where it has none."""
    f = path / RECORDS_FILE
    if not f.is_file():
        return None
    try:
        records = read_records(f)
    except (OSError, ValueError, TypeError):
        return None
    own = read_optional_json(path / SUMMARY_FILE, "sessions summary")
    own = own if isinstance(own, dict) else {}
    return summarize(records, own.get("slo") or {}, own.get("wall_s"), own.get("scenario"), own.get("server_cache"))


def per_turn_curves(rel: str, s: dict[str, Any]) -> str | None:
    """TTFT, TPOT and latency p50/p90 against the turn index, and the cached share of each turn's prompt."""
    turns = s.get("per_turn") or []
    if not turns:
        return None
    xs = [t["turn"] for t in turns]
    fig, ax = figure(7.0, 3.6)
    for key, name in CURVES:
        for p, style in (("p50", "-"), ("p90", "--")):
            ys = [(t[key] or {}).get(p, float("nan")) for t in turns]
            if any(y == y for y in ys):
                ax.plot(xs, ys, style, marker="o", markersize=3, label=f"{name} {p}")
    ax.set_xlabel("turn (0 = first)")
    ax.set_ylabel("ms")
    ax.set_title(plain(f"{rel}: per-turn latencies"))
    ax.grid(True, alpha=0.3)
    ax.legend(**LEGEND_OUTSIDE)
    share = [t.get("cached_share") for t in turns]
    if any(v is not None for v in share):
        right = ax.twinx()
        right.bar(xs, [100 * v if v is not None else 0 for v in share], alpha=0.15, color="grey",
                  label="cached prompt share")
        right.set_ylabel("cached prompt tokens (%)")
        right.set_ylim(0, 100)
    return svg(fig)


def _pct(d: dict[str, Any] | None, keys: tuple[str, ...]) -> str:
    return "n/a" if not d else " / ".join(f"{d[k]:,.1f}" for k in keys)


def summary_row(rel: str, s: dict[str, Any]) -> list[str]:
    g = s["goodput"]
    server = (s.get("server_cache") or {}).get("hit_rate") if isinstance(s.get("server_cache"), dict) else None

    def rate(v: float | None) -> str:
        return "n/a" if v is None else f"{v:,.3g}"

    return [rel, str(s["sessions_ok"]), str(s["sessions_failed"]),
            _pct(s["session_latency_ms"], ("p50", "p90", "p99")), str(s["turns"]),
            _pct(s["turn"]["ttft_ms"], ("p50", "p99")), _pct(s["turn"]["tpot_ms"], ("p50", "p99")),
            rate(s["sessions_per_s"]), rate(s["turns_per_s"]),
            "n/a" if s["client_hit_rate"] is None else f"{s['client_hit_rate']:.1%}",
            "n/a" if server is None else f"{server:.1%}",
            "n/a" if g["fraction"] is None else f"{g['fraction']:.0%} ({g['good_sessions']})"]


def section(runs: list[Any], figure_html: Any, table_html: Any) -> list[str]:
    """The HTML of the session runs among ``runs`` (their ``path`` and ``rel``): the table, then a figure each."""
    found = [(r.rel, s) for r in runs if (s := load(Path(r.path))) is not None]
    if not found:
        return []
    figures = [figure_html(per_turn_curves(rel, s), f"{rel}: TTFT, TPOT and turn latency (p50 solid, p90 dashed) "
                           "against the turn index; grey bars: the share of each turn's prompt tokens served from "
                           "the server's prefix cache (usage.prompt_tokens_details.cached_tokens).")
               for rel, s in found]
    intro = ("One LoadGen sample is one session: LoadGen times whole sessions, the turns inside are the player's "
             "records (sessions.jsonl).")
    return [f"<h2>Sessions</h2><p>{escape(intro)}</p>",
            table_html(COLUMNS, [summary_row(rel, s) for rel, s in found]),
            '<div class="figs">' + "".join(figures) + "</div>"]
