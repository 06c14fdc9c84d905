"""The latency figures of a run's result table, from LoadGen's detail log: a Server run's p99 against its bound
(the query latency; for a generative model the time to first token (TTFT) and the time per output token (TPOT)),
and a generative model's tokens per second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.loadgen.logs import detail_values

PERCENTILES = ("50.00", "90.00", "99.00")
THROUGHPUT_KEYS = ("result_tokens_per_second", "result_completed_tokens_per_second")


def _ms(ns: Any) -> str:
    return f"{float(ns) / 1e6:,.2f}"


def p99_against(p99_ns: Any, bound_ns: Any) -> str:
    """``p99 1.62 ms ≤ bound 10.00 ms``: the percentile a Server run is judged on, beside its bound."""
    sign = "≤" if float(p99_ns) <= float(bound_ns) else ">"
    return f"p99 {_ms(p99_ns)} ms {sign} bound {_ms(bound_ns)} ms"


def latency_rows(outdir: Path) -> list[tuple[str, str]]:
    """A Server run of a model without token latencies: its query latency percentiles, p99 against the bound."""
    path = outdir / "mlperf_log_detail.txt"
    if not path.is_file():
        return []
    d = detail_values(path)
    bound = d.get("effective_target_latency_ns", d.get("requested_server_target_latency_ns"))
    values = [d.get(f"result_{p}_percentile_latency_ns") for p in PERCENTILES]
    if d.get("requested_use_token_latencies") or d.get("effective_scenario") != "Server" or bound is None or \
            any(v is None for v in values):
        return []
    return [("latency", f"p50 {_ms(values[0])} ms, p90 {_ms(values[1])} ms, {p99_against(values[2], bound)}")]


def token_rows(outdir: Path, throughput: bool = True) -> list[tuple[str, str]]:
    """(label, value) rows for the result table; none when the run did not measure token latencies.
    ``throughput``: include tokens/s (not when the table's metric row already shows it)."""
    path = outdir / "mlperf_log_detail.txt"
    if not path.is_file():
        return []
    d = detail_values(path)
    if not d.get("requested_use_token_latencies"):
        return []
    rows = []
    for key in THROUGHPUT_KEYS if throughput else ():
        if d.get(key) is not None:
            rows.append(("tokens/s", f"{float(d[key]):,.2f}"))
            break
    for label, fmt, limit_key in (("TTFT", "result_first_token_{}_percentile_latency_ns",
                                   "requested_server_ttft_latency"),
                                  ("TPOT", "result_time_per_output_token_{}_percentile_ns",
                                   "requested_server_tpot_latency")):
        values = [(p, d.get(fmt.format(p))) for p in PERCENTILES]
        if any(v is None for _, v in values):
            continue
        text = ", ".join(f"p{p.split('.')[0]} {_ms(v)} ms" for p, v in values[:2])
        if d.get("effective_scenario") == "Server" and d.get(limit_key) is not None:
            text += f", {p99_against(values[2][1], d[limit_key])}"
        else:
            text += f", p99 {_ms(values[2][1])} ms"
        rows.append((label, text))
    return rows
