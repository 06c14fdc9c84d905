"""Two LoadGen tests back to back in one process both carry the embedded seeds, with no 'Multiple conf files'
error: the settings are loaded as embedded conf (conf_type 0) plus user conf (conf_type 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import detail_values
from mlharness.run.runner import RunOptions, run

pytestmark = pytest.mark.slow


def _seeds(detail: Path) -> dict[str, int]:
    values = detail_values(detail)
    return {k: values[f"effective_{k}"] for k in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")}


def test_embedded_seeds_are_the_installed_loadgen_round():
    seeds = lgs.embedded_seeds()
    # the v6.1 round's seeds, embedded by LoadGen 6.0.16 and later (README records the pin)
    assert seeds["qsl_rng_seed"] == 2085463073848966840
    assert seeds["sample_index_rng_seed"] == 2747215439041700203
    assert seeds["schedule_rng_seed"] == 16159082839903944936


def test_accuracy_then_performance_in_one_process(tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    acc = run(RunOptions(scenario="Offline", mode="accuracy", output=tmp_path / "acc", count=32))
    perf = run(RunOptions(
        scenario="SingleStream", mode="performance", output=tmp_path / "perf", count=32,
        overrides=lgs.Overrides(min_duration_ms=200, min_query_count=32, target_latency_ms=0.01),
    ))
    assert acc.accuracy is not None and acc.accuracy.value == 100.0
    assert perf.summary.valid
    for out in (tmp_path / "acc", tmp_path / "perf"):
        detail = out / "mlperf_log_detail.txt"
        text = detail.read_text()
        assert "Multiple conf files" not in text
        assert _seeds(detail) == {k: v for k, v in lgs.embedded_seeds().items() if not k.startswith("test05")}
        assert detail_values(detail)["errors"] == []
        meta = json.loads((out / "mlharness_run.json").read_text())
        assert meta["loadgen_seeds"]["qsl_rng_seed"] == 2085463073848966840


def test_naive_double_fromconfig_is_what_we_avoid(tmp_path):
    """Control: the check above can fail. Two conf_type=1 loads in one process make LoadGen log the error."""
    import subprocess
    import sys

    script = f"""
import mlperf_loadgen as lg
conf = {str(tmp_path / 'user.conf')!r}
open(conf, 'w').write('*.Offline.target_qps = 10\\n')
for _ in range(2):
    s = lg.TestSettings()
    s.FromConfig(conf, 'resnet50', 'Offline')
def issue(qs):
    lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in qs])
sut = lg.ConstructSUT(issue, lambda: None)
qsl = lg.ConstructQSL(8, 8, lambda i: None, lambda i: None)
s.scenario = lg.TestScenario.Offline
s.mode = lg.TestMode.PerformanceOnly
s.min_duration_ms = 10
s.min_query_count = 8
ls = lg.LogSettings()
ls.log_output.outdir = {str(tmp_path)!r}
ls.enable_trace = False
lg.StartTestWithLogSettings(sut, qsl, s, ls, {str(tmp_path / 'none.config')!r})
"""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=60)
    assert "Multiple conf files" in (tmp_path / "mlperf_log_detail.txt").read_text()
