"""A development submission's performance retry keeps its development sizing (calibrate_dev.development_duration):
``submission run`` repeats an INVALID calibrated run from the effective user.conf alone (the setting flags dropped,
their values as conf lines, the fix appended), and that run is sized from the expected rate as the first one was,
not by mlperf.conf's counts (rgat's 788,379 samples); official runs and a duration only the round sets keep theirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mlharness.calibration import calibrate_dev
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import detail_values
from mlharness.rounds import MIN_DURATION_MS
from tests.helpers.cli import cli
from tests.helpers.echo_manifest import echo_manifest
from tests.test_submission_development import OVERRIDES


def _plan(conf: Path | None, model: str = "rgat", **overrides) -> tuple[lgs.SettingsPlan, object]:
    plan = lgs.SettingsPlan(model=model, official=True, scenario="Offline", mode="performance", user_conf=conf,
                            overrides=lgs.Overrides(**overrides), audit_config=None)
    return plan, lgs.build_test_settings(plan)


def _retry_conf(tmp_path: Path, duration: int) -> Path:
    """What the retry is given: the effective user.conf (the flag as a line, the calibrated rate) and the fix."""
    conf = tmp_path / "performance.user.retry1.conf"
    conf.write_text(lgs.effective_user_conf(None, "rgat", "Offline", {"min_duration_ms": duration})
                    + "rgat.Offline.target_qps = 50\n# INVALID run, retry 1: min duration not met\n"
                    "rgat.Offline.target_qps = 100\n")
    return conf


def test_a_retry_from_the_effective_user_conf_is_sized_as_the_development_run(tmp_path):
    plan, settings = _plan(_retry_conf(tmp_path, 1000))
    assert calibrate_dev.development_duration(plan, settings) == 1000 and calibrate_dev.applies(plan, settings)
    assert int(settings.min_query_count) == 788379
    sized = calibrate_dev.size(plan, settings, 1024)
    # 1.1 x 1 s x the fix's 100 samples/s, the fix on top of the calibrated line
    assert int(settings.min_query_count) == 110 == int(settings.performance_sample_count_override)
    assert sized["min_query_count"] == [788379, 110] and "--min-query-count 788379 restores" in sized["message"]
    # the flag and the line say the same: the first try and its retry are one kind of run
    flagged, flagged_settings = _plan(None, min_duration_ms=1000)
    assert calibrate_dev.development_duration(flagged, flagged_settings) == 1000


def test_official_runs_keep_mlperf_confs_counts(tmp_path):
    official, settings = _plan(_retry_conf(tmp_path, MIN_DURATION_MS))  # a retry at the official duration
    assert calibrate_dev.development_duration(official, settings) is None
    assert calibrate_dev.size(official, settings, 1024) is None and int(settings.min_query_count) == 788379
    # e2e-rag's duration of 0 is the round's, not a development shortcut: its 824 questions stay
    rag, rag_settings = _plan(None, model="e2e-rag-qna")
    assert int(rag_settings.min_duration_ms) == 0
    assert calibrate_dev.development_duration(rag, rag_settings) is None and not calibrate_dev.applies(rag, rag_settings)
    # the package's own user.conf files are generic guesses, never the user's duration
    assert calibrate_dev.development_duration(*_plan(lgs.default_user_conf("rgat"))) is None


def test_a_count_given_on_the_command_line_is_kept(tmp_path):
    plan, settings = _plan(_retry_conf(tmp_path, 1000), min_query_count=500)
    assert calibrate_dev.size(plan, settings, 1024) is None and int(settings.min_query_count) == 500


# rgat's mlperf.conf counts (788,379 samples) over an echo model whose predict is slow only inside calibration: the
# calibrated rate is far below what the run then does, so the first performance try ends before its min_duration
# (INVALID, whatever the host) and, its run's own second play turned off (--no-second-try), submission run repeats
# it with a higher expected rate
SLOW_CALIBRATION = echo_manifest("slowcalibration", """\
import sys
import time

def calibrating():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith("calibrate.py"):
            return True
        frame = frame.f_back
    return False

def predict(ctx, run, inputs):
    time.sleep(0.03 if calibrating() else 0.0002)
    return run(inputs)
""", mlperf="{model: rgat}")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_submission_runs_retry_of_an_invalid_development_run_stays_development_sized(env, tmp_path):
    manifest, overrides = tmp_path / "slowcalibration.yaml", tmp_path / "system.yaml"
    manifest.write_text(SLOW_CALIBRATION)
    overrides.write_text(yaml.safe_dump(OVERRIDES))
    results = tmp_path / "results"
    # without the fix the retry asks for 788,379 samples: the timeout ends it
    proc = cli(env, "submission", "run", "--manifest", str(manifest), "--scenarios", "Offline", "--division", "open",
               "--submitter", "Acme", "--system-name", "box", "--results", str(results), "--system-overrides",
               str(overrides), "--min-duration-ms", "1000", "--no-second-try", timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "rgat/Offline performance INVALID (min duration not met): again with --target-qps" in " ".join(out.split())
    record = results / ".mlharness" / "runs" / "box" / "rgat" / "Offline" / "performance"
    meta = json.loads((record / "mlharness_run.json").read_text())  # the last try's
    argv = json.loads((record / "step.json").read_text())["argv"]
    # the retry runs from the effective user.conf and the fix alone: its duration is a line there, not a flag
    assert "--min-duration-ms" not in argv and ".retry" in Path(argv[argv.index("--user-conf") + 1]).name, argv
    assert meta["calibration"]["calibrated"] is False  # the retry's rate is the fix's, stated in its user.conf
    sized = meta["calibration"]["development_sizing"]
    assert sized["min_query_count"][0] == 788379 and sized["min_query_count"][1] < 100_000, sized  # a second of this echo
    run = results / "box" / "rgat" / "Offline" / "performance" / "run_1"
    assert "Result is : VALID" in (run / "mlperf_log_summary.txt").read_text()
    assert detail_values(run / "mlperf_log_detail.txt")["requested_min_query_count"] == sized["min_query_count"][1]
