"""`mlharness coldstart`: each trial a fresh process that loads the model and answers one sample, its steps
timed from the moment the process was started; the page cache dropped through a stand-in control file."""

from __future__ import annotations

import json
import os

import pytest

from mlharness.errors import MLHarnessError
from mlharness.measurement.coldstart import STEPS, ColdStartConfig, cold_start, mean_interval


@pytest.fixture(autouse=True)
def _cache(shared_cache, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))  # the demo model generated once per session


def test_each_trial_is_a_fresh_process_whose_steps_add_up(run_cli):
    proc = run_cli("coldstart", "--trials", "3", "--warm", "5", "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    trials = result["trials"]
    assert [t["trial"] for t in trials] == [1, 2, 3]
    pids = {t["pid"] for t in trials}
    assert len(pids) == 3 and os.getpid() not in pids  # a new process each time
    for t in trials:
        steps = t["steps"]
        for name in ("process_start", "harness_import", "model_load", "first_inference", "warm_inference"):
            assert steps[name] > 0, (name, steps)
        # the steps run back to back from the process's start to its first answer
        assert sum(steps[name] for name, _ in STEPS) == pytest.approx(steps["total"], rel=1e-9)
        assert steps["warm_inference"] < steps["total"]
    figures = result["figures"]
    assert figures["warm_inference"]["mean"] < figures["total"]["mean"]
    for f in figures.values():
        assert f["min"] <= f["ci95_low"] <= f["mean"] <= f["ci95_high"] <= f["max"]
    assert result["page_cache"] == "as found" and result["warm_per_trial"] == 5
    table = run_cli("coldstart", "--trials", "1", "--warm", "1", timeout=240)
    assert table.returncode == 0, table.stderr
    assert "first inference" in table.stdout and "page cache was not dropped" in table.stdout


def test_drop_caches_writes_the_kernel_control_before_each_trial(tmp_path):
    control = tmp_path / "drop_caches"  # a stand-in for /proc/sys/vm/drop_caches
    control.write_text("")
    result = cold_start(ColdStartConfig(manifest="demo", trials=2, warm=1, drop_caches=True,
                                        drop_caches_path=control))
    assert control.read_text() == "3\n"
    assert result["page_cache"] == "dropped before each trial"
    with pytest.raises(MLHarnessError, match="not writable here"):
        cold_start(ColdStartConfig(manifest="demo", trials=1, drop_caches=True,
                                   drop_caches_path=tmp_path / "no" / "such" / "control"))


def test_a_failing_trial_says_which_and_why(tmp_path):
    """resnet50-random needs an ImageNet folder: its first trial fails with the dataset hook's own message."""
    with pytest.raises(MLHarnessError) as e:
        cold_start(ColdStartConfig(manifest="resnet50-random", trials=2, warm=1, timeout_s=120))
    assert "cold-start trial 1 ended with exit status 2" in str(e.value)
    assert "needs --dataset-path" in str(e.value) and "Traceback" not in str(e.value)


def test_mean_interval():
    f = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert f["mean"] == 2.5 and f["min"] == 1.0 and f["max"] == 4.0
    assert 1.0 <= f["ci95_low"] < 2.5 < f["ci95_high"] <= 4.0
    assert mean_interval([0.5])["ci95_low"] is None
