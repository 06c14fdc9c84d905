"""LoadGen run folders written in LoadGen's own formats, for tests of the code that reads them."""

from __future__ import annotations

import json
from pathlib import Path

RESULT_KEY = {"Offline": "result_samples_per_second", "SingleStream": "early_stopping_latency_ss",
              "MultiStream": "early_stopping_latency_ms", "Server": "result_completed_samples_per_sec"}


def write_run(folder: Path, scenario: str, score: float, valid: bool = True, **detail: object) -> Path:
    """A run folder as LoadGen writes it: a detail log and a summary, with ``score`` as the result (a latency
    in ns for SingleStream / MultiStream). Returns the detail log."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {"effective_scenario": scenario, RESULT_KEY[scenario]: score,
              "result_validity": "VALID" if valid else "INVALID", **detail}
    (folder / "mlperf_log_detail.txt").write_text("".join(
        f":::MLLOG {json.dumps({'key': k, 'value': v, 'metadata': {'is_error': False, 'is_warning': False}})}\n"
        for k, v in values.items()))
    result = {"SingleStream": f"90.0th percentile latency (ns) : {int(score * 0.9)}",
              "MultiStream": f"99.0th percentile latency (ns) : {int(score * 0.9)}",
              "Server": f"Completed samples per second    : {score:.2f}",
              "Offline": f"Samples per second: {score}"}[scenario]
    lines = ["=" * 48, "MLPerf Results Summary", "=" * 48, "SUT name : PyFastSUT", f"Scenario : {scenario}",
             "Mode     : PerformanceOnly", result, f"Result is : {'VALID' if valid else 'INVALID'}",
             "  Min duration satisfied : Yes", "  Min queries satisfied : Yes", "  Early stopping satisfied: Yes"]
    if scenario == "SingleStream":
        lines += ["Early Stopping Result:", " * Processed at least 64 queries (7510).",
                  " * Would discard 689 highest latency queries.",
                  f" * Early stopping 90.0th percentile estimate: {int(score)}",
                  f" * Early stopping 99.0th percentile estimate: {int(score) * 3}"]
    elif scenario == "MultiStream":
        lines += ["Early Stopping Result:", " * Processed at least 662 queries (900).",
                  " * Would discard 2 highest latency queries.",
                  f" * Early stopping 99.0th percentile estimate: {int(score)}"]
    elif scenario == "Server":
        lines += ["Early Stopping Result:", " * Run successful."]
    lines += ["", "=" * 48, "Test Parameters Used", "=" * 48, "samples_per_query : 1",
              "target_latency (ns): 15000000", "", "No warnings encountered during test.", "",
              "No errors encountered during test."]
    (folder / "mlperf_log_summary.txt").write_text("\n".join(lines) + "\n")
    return folder / "mlperf_log_detail.txt"
