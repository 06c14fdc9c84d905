"""A development submission's performance retry keeps its development sizing (calibrate_dev.development_duration):
``submission run`` repeats an INVALID calibrated run from the effective user.conf alone (the setting flags dropped,
their values as conf lines, the fix appended), and that run is sized from the expected rate as the first one was,
not by mlperf.conf's counts (rgat's 788,379 samples); official runs and a duration only the round sets keep theirs."""

from __future__ import annotations

from pathlib import Path

from mlharness.calibration import calibrate_dev
from mlharness.loadgen import settings as lgs
from mlharness.rounds import MIN_DURATION_MS


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
