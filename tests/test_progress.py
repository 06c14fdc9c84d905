"""The up-front estimate of a run (LoadGen's rules for the effective TestSettings) and the progress lines printed
when the output is not a terminal (every $MLHARNESS_PROGRESS_INTERVAL_S seconds; set small here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlharness.calibration.estimate import estimate_run, note_expected

ECHO = """\
name: echo_slow
framework: {{name: echo, options: {{sleep_ms: {sleep_ms}}}}}
inputs: [{{name: label, element_type: int64, shape: [1]}}]
outputs: [{{name: label, element_type: int64, shape: [1]}}]
dataset: demo_images
response: {{element_type: float32}}
accuracy: {{metric: imagenet_top1, options: {{val_map: val_map.txt}}}}
batching: {{max_batchsize: 4}}
preprocess: |
  import time

  import numpy as np
  from mlharness.tasks.demo import dataset as demo

  def preprocess(ctx, index):
      time.sleep({load_ms} / 1000)
      return np.array([demo.demo_label(index)], dtype=np.int64)
postprocess: |
  import numpy as np

  def postprocess(ctx, outputs):
      return outputs[0].reshape(-1).astype(np.float32)
"""


def _settings(scenario: str, mode: str = "PerformanceOnly", **values):
    import mlperf_loadgen as lg

    s = lg.TestSettings()
    s.scenario = getattr(lg.TestScenario, scenario)
    s.mode = getattr(lg.TestMode, mode)
    for k, v in values.items():
        setattr(s, k, v)
    return s


def test_estimates_follow_loadgens_rules():
    e = estimate_run(_settings("Offline", min_duration_ms=10_000, min_query_count=1, offline_expected_qps=200))
    assert (e.queries, e.samples) == (1, 2200) and e.seconds == pytest.approx(11.0)  # 1.1 x 10 s x 200
    e = estimate_run(_settings("Offline", min_duration_ms=1000, min_query_count=24576, offline_expected_qps=100))
    assert e.samples == 24576 and e.seconds == pytest.approx(245.76)
    e = estimate_run(_settings("Server", min_duration_ms=600_000, min_query_count=100, server_target_qps=50))
    assert (e.queries, e.samples) == (30_000, 30_000) and e.seconds == pytest.approx(600) and e.at_least
    e = estimate_run(_settings("SingleStream", min_duration_ms=1000, min_query_count=1024,
                               single_stream_expected_latency_ns=5_000_000))
    assert e.queries == 1024 and e.seconds == pytest.approx(5.12)  # min_query_count dominates
    e = estimate_run(_settings("MultiStream", min_duration_ms=2000, min_query_count=10,
                               multi_stream_expected_latency_ns=10_000_000, multi_stream_samples_per_query=8))
    assert (e.queries, e.samples) == (200, 1600) and e.seconds == pytest.approx(2.0)
    e = estimate_run(_settings("Server", min_duration_ms=600_000, min_query_count=100, server_target_qps=50,
                               max_query_count=500))
    assert e.queries == 500 and e.seconds == pytest.approx(10.0)
    # accuracy mode: LoadGen's expected value is a placeholder there, so no time without a measured rate
    settings = _settings("Offline", "AccuracyOnly", offline_expected_qps=100)
    e = estimate_run(settings, 256)
    assert (e.queries, e.samples, e.mode, e.seconds) == (1, 256, "accuracy", None)
    assert "100" not in e.line() and "follow from the first samples" in e.line(), e.line()
    note_expected(settings, 64.0)  # a calibration's figure (a token model's Server accuracy run calibrates)
    e = estimate_run(settings, 256)
    assert e.seconds == pytest.approx(4.0) and "about 4.0 s at 64.0 samples/s (from calibration)" in e.line()
    assert "about 10 min 00 s" in estimate_run(_settings("Server", min_duration_ms=600_000, min_query_count=1,
                                                          server_target_qps=50)).line()


def _echo(tmp_path: Path, sleep_ms: int, load_ms: int) -> Path:
    path = tmp_path / "echo_slow.yaml"
    path.write_text(ECHO.format(sleep_ms=sleep_ms, load_ms=load_ms))
    return path


@pytest.mark.slow
def test_performance_run_prints_the_estimate_and_progress_lines(run_cli, cli_env, tmp_path):
    env = dict(cli_env, MLHARNESS_PROGRESS_INTERVAL_S="0.2")
    manifest = _echo(tmp_path, 20, 0)
    out = tmp_path / "ss"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "SingleStream", "--mode", "performance",
                   "--min-duration-ms", "1200", "--min-query-count", "10", "--target-latency-ms", "20", "--count",
                   "16", "--output", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    # 1.2 s at 20 ms per query: 60 queries (min_query_count 10 is less)
    assert ("SingleStream performance run: LoadGen will issue at least 60 queries of 1 sample; about 1.2 s at the "
            "stated latency of 20.000 ms per query (expected latency, not measured)") in proc.stderr, proc.stderr
    lines = re.findall(r"progress: ([\d,]+) / ~60 samples completed \((\d+)%\)", proc.stderr)
    assert lines, proc.stderr
    done = [int(d.replace(",", "")) for d, _ in lines]
    assert done == sorted(done) and 0 < done[-1] <= 200

    # Offline: the estimate is exactly LoadGen's query size
    out = tmp_path / "off"
    proc = run_cli("run", "--scenario", "Offline", "--mode", "performance", "--min-duration-ms", "300",
                   "--target-qps", "1000", "--output", str(out), "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"Offline performance run: LoadGen will issue 1 query of ([\d,]+) samples; about 0\.3 s",
                  proc.stderr)
    assert m and int(m.group(1).replace(",", "")) == 330, proc.stderr
    detail = (out / "mlperf_log_detail.txt").read_text()
    assert re.search(r'"generated_samples_per_query", "value": 330\b', detail)
    assert "progress:" not in proc.stderr  # --no-progress: the estimate only


@pytest.mark.slow
def test_accuracy_run_reports_loading_and_samples_done(run_cli, cli_env, tmp_path):
    env = dict(cli_env, MLHARNESS_PROGRESS_INTERVAL_S="0.2")
    manifest = _echo(tmp_path, 30, 15)  # 64 samples: ~1 s of loading, then ~0.5 s of batches of 4
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--count", "64", "--output",
                   str(tmp_path / "acc"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Offline accuracy run: LoadGen will issue 1 query of 64 samples" in proc.stderr, proc.stderr
    loading = re.findall(r"loading samples: ([\d,]+) / 64 \(\d+%\)", proc.stderr)
    assert loading and int(loading[-1]) < 64, proc.stderr
    assert re.search(r"progress: \d+ / 64 samples completed", proc.stderr), proc.stderr


def test_bars_on_a_terminal_and_lines_elsewhere_from_the_sut_counters():
    import io
    import time
    from types import SimpleNamespace

    from rich.console import Console

    from mlharness.progress import RunProgress

    settings = _settings("Offline", min_duration_ms=1000, min_query_count=1, offline_expected_qps=100)
    for terminal in (True, False):
        buf = io.StringIO()
        console = Console(file=buf, force_terminal=terminal, width=120)
        sut = SimpleNamespace(issued=0, completed=0)
        progress = RunProgress(console, interval_s=0.05)
        progress.attach(sut, None, settings)
        progress.load(16, 32)
        time.sleep(0.3)
        sut.issued, sut.completed = 110, 55  # what the SUT's completion routine counts
        time.sleep(0.4 if terminal else 0.2)
        progress.close()
        text = buf.getvalue()
        assert "Offline performance run: LoadGen will issue 1 query of 110 samples" in text
        if terminal:
            assert "running" in text and "55/110" in text and "progress:" not in text, text
        else:
            assert "loading samples: 16 / 32 (50%)" in text and "progress: 55 / 110 samples completed (50%)" in text
