"""`mlharness bench overhead` runs end to end (on the demo model, quick) and reports every figure the
performance goals are stated in; the figures' values are the benchmark's business, not this test's."""

from __future__ import annotations

import json
import math

import pytest

from mlharness.measurement.bench import format_figures

pytestmark = pytest.mark.slow

KEYS = ("offline_ratio", "singlestream_p90_overhead_ms", "singlestream_bare_p90_ms", "null_overhead_us",
        "null_offline_sps", "server_ratio", "server_ideal_qps", "server_ideal_ratio", "loadgen_null_offline_sps",
        "loadgen_null_singlestream_p90_us", "trace_model_cost_us")


def test_bench_overhead_quick_reports_every_figure(run_cli):
    proc = run_cli("bench", "overhead", "--manifest", "demo", "--quick", "--seconds", "0.3", "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr
    f = json.loads(proc.stdout.strip().splitlines()[-1])
    for k in KEYS:
        assert isinstance(f[k], int | float) and math.isfinite(f[k]), k
    assert f["null_offline_sps"] > 1000 and f["loadgen_null_offline_sps"] > 1000
    assert f["offline_ratio"] > 0 and f["singlestream_bare_p90_ms"] > 0
    # one Server trial in --quick, at half the ideal ceiling for a trial of its length
    assert len(f["server_tried"]) == 1
    assert f["server_tried"][0]["qps"] == pytest.approx(0.5 * f["server_ideal_qps_at_trial_length"])
    assert 0 < f["server_ideal_qps_at_trial_length"] <= f["server_ideal_qps"]
    assert f["server_best_valid_qps"] <= f["server_ideal_qps"]
    assert set(f["server_batch_ms"]) == {"1", "2", "4", "8"}  # the demo's Server batch is 8
    # the trial also went through the ideal queue with its own arrivals and predict times, and the bare model
    # was timed just before it
    (trial,) = f["server_tried"]
    assert trial["bare_ms"] > 0 and trial["ideal_p99_ms"] > 0 and trial["late_allowed"] >= 0
    assert trial["harness_p99_cost_ms"] == pytest.approx(trial["p99_ms"] - trial["ideal_p99_ms"])
    assert 0 <= f["server_cost_as_ceiling_ratio"] <= 1 and f["server_verdicts_as_ideal"] in (0, 1)
    # the same figures as the command prints them without --json: every goal is stated next to its figure
    text = format_figures(f)
    for goal in ("(goal <= 30)", "(goal >= 100,000)", "(goal >= 0.97)", "within 2% or 1 ms", "(goal >= 0.75)",
                 "ideal-queue ceiling at p99", "harness p99 cost over it", "trial at"):
        assert goal in text, goal
