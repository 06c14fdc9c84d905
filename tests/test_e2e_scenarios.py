"""The demo end to end through the real CLI, the real LoadGen and ONNX Runtime, in all four scenarios."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlharness.loadgen.logs import parse_summary

pytestmark = pytest.mark.slow

# Short, VALID-capable settings: a small min duration, and expected performance set well above what the
# demo reaches on any machine, so LoadGen generates enough queries to fill the duration.
SHORT = {
    "SingleStream": ["--min-duration-ms", "300", "--min-query-count", "64", "--target-latency-ms", "0.01"],
    "MultiStream": ["--min-duration-ms", "300", "--min-query-count", "64", "--target-latency-ms", "0.01"],
    "Server": ["--min-duration-ms", "1500", "--min-query-count", "100", "--target-qps", "600",
               "--target-latency-ms", "100"],
    "Offline": ["--min-duration-ms", "100", "--min-query-count", "100", "--target-qps", "2000000"],
}


def _summary(path: Path) -> dict[str, str]:
    return parse_summary(path, "Offline").fields


def test_demo_accuracy_is_exactly_100_percent(run_cli, tmp_path):
    out = tmp_path / "acc"
    proc = run_cli("run", "--scenario", "Offline", "--mode", "accuracy", "--output", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=256, total=256\n"
    assert "accuracy=100.000%" in proc.stdout
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(256))
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["samples"]["issued"] == meta["samples"]["completed"] == 256
    assert meta["official_benchmark"] is False and meta["submittable"] is False


@pytest.mark.parametrize("scenario", ["SingleStream", "MultiStream", "Server", "Offline"])
def test_demo_performance_is_valid(run_cli, tmp_path, scenario):
    out = tmp_path / scenario
    proc = run_cli("run", "--scenario", scenario, "--mode", "performance", "--output", str(out), "--no-progress",
                   *SHORT[scenario])
    assert proc.returncode == 0, proc.stderr
    summary = _summary(out / "mlperf_log_summary.txt")
    assert summary["Scenario"] == scenario
    assert summary["Mode"] == "PerformanceOnly"
    assert summary["Result is"] == "VALID", (out / "mlperf_log_summary.txt").read_text()
    assert "VALID" in proc.stdout
    metric = {"SingleStream": "90.0th percentile latency (ns)", "MultiStream": "99.0th percentile latency (ns)",
              "Server": "Completed samples per second", "Offline": "Samples per second"}[scenario]
    assert float(summary[metric]) > 0
    assert metric in proc.stdout
    # performance mode logs no responses (no audit config)
    assert json.loads((out / "mlperf_log_accuracy.json").read_text() or "[]") == []
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["samples"]["issued"] == meta["samples"]["completed"] > 0
    if scenario == "MultiStream":
        assert meta["samples"]["issued"] % 8 == 0


def test_default_output_layout(run_cli, tmp_path):
    proc = run_cli("run", "--scenario", "SingleStream", "--mode", "accuracy", "--count", "16", "--no-progress",
                   "--system", "mybox", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    acc = tmp_path / "results" / "mybox" / "demo" / "SingleStream" / "accuracy"
    assert (acc / "accuracy.txt").read_text() == "accuracy=100.000%, good=16, total=16\n"
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json"):
        assert (acc / name).is_file()


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_several_instances_give_the_same_accuracy(run_cli, tmp_path, scenario):
    out = tmp_path / "inst"
    proc = run_cli("run", "--scenario", scenario, "--mode", "accuracy", "--output", str(out), "--no-progress",
                   "--instances", "3", "--count", "96")
    assert proc.returncode == 0, proc.stderr
    assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=96, total=96\n"
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["predictor"]["instances"] == 3
    assert meta["batching"]["workers"] >= 1
    assert meta["samples"]["issued"] == meta["samples"]["completed"] == 96


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning two instances needs two usable cores")
def test_pinned_instances_give_the_same_accuracy(run_cli, tmp_path):
    out = tmp_path / "pinned"
    proc = run_cli("run", "--scenario", "Offline", "--mode", "accuracy", "--output", str(out), "--no-progress",
                   "--instances", "2", "--pin-cores", "--count", "64")
    assert proc.returncode == 0, proc.stderr
    assert (out / "accuracy.txt").read_text() == "accuracy=100.000%, good=64, total=64\n"
    meta = json.loads((out / "mlharness_run.json").read_text())
    cores = sorted(os.sched_getaffinity(0))
    pinned = meta["batching"]["pinned_cores"]
    assert len(pinned) == 2 and sorted(c for g in pinned for c in g) == cores  # disjoint, all cores used
