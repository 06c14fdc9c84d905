"""The checker's rules that only generative (LLM) benchmarks have (see :mod:`mlharness.submission.llm_rules`):
token latencies requested, p99 time to first token and time per output token under the benchmark's limits,
every ROUGE figure and the generated length within their targets, and TEST06."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mlharness.submission.findings import Findings
from mlharness.submission.llm_rules import (
    LLM_ACC_PATTERNS,
    LLM_ACCURACY_TARGETS,
    LLM_ACCURACY_UPPER,
    LLM_LATENCY_LIMITS,
    loadgen_scenario,
)
from mlharness.submission.rules import Benchmark
from mlharness.submission.test06 import passes as test06_passes
from mlharness.userfiles import read_log_text

TTFT_P99 = "result_first_token_99.00_percentile_latency_ns"
TPOT_P99 = "result_time_per_output_token_99.00_percentile_ns"
TOKEN_METRIC = {"Offline": "result_tokens_per_second", "Server": "result_completed_tokens_per_second"}


def llm_figures(lines: list[str]) -> dict[str, float]:
    """Every LLM accuracy figure the checker's patterns find in accuracy.txt (the first match of each)."""
    found: dict[str, float] = {}
    for line in lines:
        for kind, pattern in LLM_ACC_PATTERNS.items():
            if kind not in found:
                m = re.match(pattern, line.strip())
                if m:
                    found[kind] = float(m.group(1))
    return found


def check_llm_accuracy(c: Findings, division: str, info: Benchmark, acc: Path, lines: list[str]) -> None:
    figures = llm_figures(lines)
    targets = LLM_ACCURACY_TARGETS[info.name]
    if figures:
        c.row.accuracy = ", ".join(f"{k} {v:g}" for k, v in figures.items() if k in targets)
    if division == "open":
        return
    for kind, target in targets.items():
        value = figures.get(kind)
        if value is None:
            c.error(acc / "accuracy.txt", f"holds no {kind} figure (pattern {LLM_ACC_PATTERNS[kind]}; numbers must "
                                          f"be plain, not np.int64(...))")
        elif value < target:
            c.error(acc / "accuracy.txt", f"{kind} {value:g} is below the closed-division target {target:.7g} "
                                          f"for {info.name}")
    for kind, upper in LLM_ACCURACY_UPPER.get(info.name, {}).items():
        value = figures.get(kind)
        if value is not None and value > upper:
            c.error(acc / "accuracy.txt", f"{kind} {value:g} is above the upper limit {upper:.7g} for {info.name}")


def check_llm_run(c: Findings, info: Benchmark, scenario: str, values: dict[str, Any], detail: Path) -> str:
    """Token-latency rules of one performance run of an LLM benchmark; returns its result for the table."""
    if values.get("requested_use_token_latencies") is not True:
        c.error(detail, f"requested_use_token_latencies is {values.get('requested_use_token_latencies')}: "
                        f"{info.name} results must be measured with token latencies (use_token_latencies)")
    limits = LLM_LATENCY_LIMITS.get(info.name, {}).get(scenario)
    if limits is not None:
        for key, name, limit in ((TTFT_P99, "TTFT", limits["ttft"]), (TPOT_P99, "TPOT", limits["tpot"])):
            value = values.get(key)
            if value is None:
                c.error(detail, f"has no {key}: not a token-latency {scenario} run")
            elif value >= limit:
                c.error(detail, f"p99 {name} {value / 1e6:g} ms is not under the {scenario} limit "
                                f"{limit / 1e6:g} ms for {info.name}")
    lg = loadgen_scenario(scenario)
    if lg == "SingleStream":
        latency = values.get("result_90.00_percentile_latency_ns")
        return f"{latency / 1e6:,.3f} ms" if isinstance(latency, int | float) else "-"
    tokens = values.get(TOKEN_METRIC.get(lg, ""))
    return f"{tokens:,.1f} tokens/s" if isinstance(tokens, int | float) else "-"


def check_test06(c: Findings, test_dir: Path) -> bool:
    """A TEST06 directory: verify_accuracy.txt with the three checks passed, and the sampled accuracy log."""
    log = test_dir / "accuracy" / "mlperf_log_accuracy.json"
    if not log.is_file():
        c.error(log, "missing")
    verify = test_dir / "verify_accuracy.txt"
    if not verify.is_file():
        c.error(verify, "missing")
        return False
    passed = test06_passes(verify)
    if not passed:
        failed = [line.strip() for line in read_log_text(verify, "TEST06 verification").splitlines()
                  if line.strip().endswith(": False")]
        c.error(verify, f"TEST06 did not pass ({'; '.join(failed) or 'the pass lines are missing'})")
    return passed
