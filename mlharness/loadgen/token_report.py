"""The token figures of a run of a generative model, from LoadGen's detail log: tokens per second, and the
percentiles of the time to first token (TTFT) and the time per output token (TPOT) against their limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.loadgen.rundir import detail_values

PERCENTILES = ("50.00", "90.00", "99.00")
THROUGHPUT_KEYS = ("result_tokens_per_second", "result_completed_tokens_per_second")


def _ms(ns: Any) -> str:
    return f"{float(ns) / 1e6:,.2f}"


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
        text = ", ".join(f"p{p.split('.')[0]} {_ms(v)}" for p, v in values) + " ms"
        if d.get("effective_scenario") == "Server" and d.get(limit_key) is not None:
            text += f" (p99 limit {_ms(d[limit_key])} ms)"
        rows.append((label, text))
    return rows
