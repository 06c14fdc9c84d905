"""Calibration that holds on a busy host: a tiny PyTorch model through the real CLI and the real LoadGen is VALID
with nothing but ``--min-duration-ms 2000``, also while another process keeps a core busy, and the run lasts
about what the line printed before it said (the ratio of the two, never absolute times)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlharness.calibration import calibrate as cal
from mlharness.calibration import estimate
from mlharness.loadgen.logs import parse_summary
from mlharness.predictors.threads import intra_op_threads, usable_cores
from tests.helpers.busy import busy_core

pytestmark = pytest.mark.timing  # runs that must last what was announced, on a quiet host and with a core busy

MANIFEST = """\
name: tiny_mlp
framework: {name: pytorch}
inputs: [{name: x, element_type: float32, shape: [4]}]
outputs: [{name: y, element_type: float32, shape: [3]}]
model: {graph_path: m.pt}
batching: {max_batchsize: 4}
dataset:
  name: ramp
  init: |
    def init(count):
        return 8
preprocess: |
  import numpy as np
  def preprocess(ctx, index):
      return (np.arange(4, dtype=np.float32) + index) / 7.0
"""
ESTIMATE = re.compile(r"; about ([0-9.]+) s at ")


def write_mlp(path: Path) -> Path:
    """A TorchScript MLP of about 1 MB taking a few hundred microseconds a batch: like the small models a user
    plugs in, its time is the model's own rather than the harness's."""
    import torch

    torch.manual_seed(0)
    width = 512
    mlp = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                              torch.nn.ReLU(), torch.nn.Linear(width, 3)).eval()
    torch.jit.trace(mlp, torch.zeros(2, 4)).save(str(path))
    return path


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    write_mlp(folder / "m.pt")
    path = folder / "tiny.yaml"
    path.write_text(MANIFEST)
    return path


def _run(tmp_path: Path, manifest: Path, scenario: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MLHARNESS_CACHE=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--scenario",
                           scenario, "--mode", "performance", "--min-duration-ms", "2000", "--no-progress",
                           "--output", str(tmp_path / "run"), *extra],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)


def _performance_seconds(detail: Path) -> float:
    """How long LoadGen's performance test lasted: its power_begin to power_end marks."""
    marks = dict(re.findall(r'"key": "(power_begin|power_end)", "value": "([^"]+)"', detail.read_text()))
    begin, end = (datetime.strptime(marks[k], "%m-%d-%Y %H:%M:%S.%f") for k in ("power_begin", "power_end"))
    return (end - begin).total_seconds()


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "one-core-busy"])
@pytest.mark.parametrize("scenario", ["Offline", "SingleStream"])
def test_tiny_pytorch_run_is_valid_and_lasts_what_was_announced(manifest, tmp_path, scenario, busy):
    with busy_core(busy, seconds=60):
        proc = _run(tmp_path, manifest, scenario)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "run"
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert parse_summary(out / "mlperf_log_summary.txt", scenario).valid, (proc.stderr, summary)
    announced = ESTIMATE.search(proc.stderr)
    assert announced, proc.stderr
    # the run lasts at most 1.5x what was announced (min_duration met: it may end a little sooner)
    ratio = _performance_seconds(out / "mlperf_log_detail.txt") / float(announced.group(1))
    assert 0.5 <= ratio <= 1.5, (ratio, proc.stderr, summary)
    meta = json.loads((out / "mlharness_run.json").read_text())
    c = meta["calibration"]
    assert c["calibrated"] and c["queries_measured"] >= cal.MIN_ROUNDS and c["seconds"] >= cal.MIN_BUDGET_S
    # the run's own predictor, with the threads it chose and why (no --threads: one core left free)
    assert 1 <= meta["predictor"]["threads"] <= max(1, usable_cores() - 1)
    assert meta["predictor"]["threads_reason"].startswith("default: "), meta["predictor"]


def test_threads_flag_overrides_the_default_and_is_recorded(manifest, tmp_path):
    proc = _run(tmp_path, manifest, "Offline", "--threads", "2", "--no-calibrate", "--target-qps", "20000")
    assert proc.returncode == 0, proc.stderr
    predictor = json.loads((tmp_path / "run" / "mlharness_run.json").read_text())["predictor"]
    assert predictor["threads"] == 2 and predictor["threads_reason"].startswith("given")


def test_default_threads_leave_a_core_free(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert intra_op_threads(None, framework_default=2) == (1, intra_op_threads(None)[1])
    assert "1 of the 2 usable cores" in intra_op_threads(None)[1]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert intra_op_threads(None, framework_default=8)[0] == 8  # never above torch's physical-core default
    assert intra_op_threads(None)[0] == 15
    assert intra_op_threads(3) == (3, "given: --threads, or the cores split between instances")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert intra_op_threads(None)[0] == 1


def test_a_pass_whose_halves_disagree_is_not_settled():
    kept, stable = cal.settled([0.120] * 5 + [0.002] * 5)  # first calls 60x slower than the rest
    assert not stable and kept == [0.002] * 5
    assert cal.settled([0.010, 0.011, 0.009, 0.010])[1]


class _Slow:
    """A pipeline whose every batch takes 20 ms: over a 10 ms latency bound alone."""

    def run(self, indices):
        time.sleep(0.02)


def test_a_server_plan_over_ten_times_min_duration_says_why_and_how_to_shorten():
    settings = SimpleNamespace(server_target_latency_ns=10_000_000, min_query_count=700, min_duration_ms=2000)
    c = cal._throughput("Server", settings, [_Slow()], 16, 1, 0.05)
    assert c.extra["ideal_qps"] == 0 and "min_query_count" not in c.extra  # no rate can be VALID: not raised
    text = c.one_line()
    assert "more than 10x --min-duration-ms" in text and "no rate keeps the 10 ms latency bound" in text
    fewer = re.search(r"--min-query-count (\d+)", text)
    assert fewer and int(fewer.group(1)) <= 10 * 2 * c.value + 1
    # a plan within 10x min_duration says nothing more
    assert estimate.long_server_plan(c.value, 1, 2000, 0.0, 10.0, False) is None


def test_the_estimate_uses_the_calibrated_rate_over_the_headroom():
    import mlperf_loadgen as lg

    settings = lg.TestSettings()
    settings.scenario, settings.mode = lg.TestScenario.Offline, lg.TestMode.PerformanceOnly
    settings.min_duration_ms, settings.min_query_count = 2000, 1
    settings.offline_expected_qps = 1250.0  # 1.25 x the 1000 samples/s the run is expected to reach
    assert estimate.estimate_run(settings).seconds == pytest.approx(2.2)
    estimate.note_expected(settings, 1000.0)
    e = estimate.estimate_run(settings)
    assert e.samples == 2750 and e.seconds == pytest.approx(2.75) and "1,000.0 samples/s (from calibration)" in e.line()


def test_a_paced_trial_halves_a_rate_whose_waits_break_the_bound():
    from mlharness.calibration import server_probe

    def two_ms(i):  # a model of 2 ms a sample: 1,000 arrivals/s pile up, 125/s keep well within 40 ms
        time.sleep(0.002)

    probes = server_probe.probe_rate(two_ms, 8, 1000.0, 40.0)
    assert not probes[0].ok and probes[0].p99_ms > 20.0  # over half the bound: halved
    assert [p.qps for p in probes] == [1000.0 / 2 ** k for k in range(len(probes))]
    assert server_probe.rate_after(probes, 1000.0) < 1000.0
    text = server_probe.describe([p.as_dict() for p in probes], 40.0)
    assert "lowered by paced trials" in text and "1,000 QPS gave p99" in text
    kept = server_probe.probe_rate(two_ms, 8, 100.0, 40.0)  # a rate the host keeps: probed once, unchanged
    assert len(kept) == 1 and kept[0].ok and server_probe.rate_after(kept, 100.0) == 100.0
    assert server_probe.describe([kept[0].as_dict()], 40.0) == ""
    assert server_probe.probe_rate(two_ms, 8, 50.0, 40.0) == []  # too slow to say anything within 2 s


class _Timed:
    """A pipeline whose batches take about 1 ms."""

    def run(self, indices):
        time.sleep(0.001)

    def warmup(self, indices, n):
        pass


class _NoLoader:
    on_progress = None

    def load(self, indices):
        pass

    def unload(self, indices):
        pass


@pytest.mark.parametrize(("min_duration_ms", "headroom"), [(2000, cal.SHORT_OFFLINE_HEADROOM),
                                                           (600_000, cal.OFFLINE_HEADROOM)])
def test_short_offline_runs_ask_for_more_samples(min_duration_ms, headroom):
    import mlperf_loadgen as lg

    settings = lg.TestSettings()
    settings.min_duration_ms = min_duration_ms
    c = cal.calibrate("Offline", settings, [_Timed()], _NoLoader(), 16, 4, budget_s=0.05)
    assert c.headroom == headroom and c.value == pytest.approx(headroom * c.extra["expected_samples_per_second"],
                                                              rel=1e-3)
