"""Audit runs of a development submission are sized as the performance run they audit (calibrate_dev): the counts an
audit config sets for the official duration give way to the performance run's, Offline is sized from the same
expected rate, and official audits, audits with their own duration and counts the user stated are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlharness.calibration import calibrate_dev
from mlharness.loadgen import settings as lgs
from mlharness.submission.orchestrate import audit_config

WAN = "wan-2.2-t2v-a14b"


def _conf(tmp_path: Path, model: str, scenario: str, *lines: str) -> Path:
    """The user.conf a development performance run wrote: its duration and calibrated rate (submission run gives
    it to the audits)."""
    conf = tmp_path / "performance.user.conf"
    conf.write_text("\n".join(f"{model}.{scenario}.{line}" for line in lines) + "\n")
    return conf


def _audit(model: str, scenario: str, conf: Path | None, test: str, **overrides) -> tuple[lgs.SettingsPlan, object]:
    plan = lgs.SettingsPlan(model=model, official=True, scenario=scenario, mode="performance", user_conf=conf,
                            overrides=lgs.Overrides(**overrides), audit_config=audit_config(test, model))
    settings = lgs.build_test_settings(plan)
    return plan, settings


def test_rgat_test01_is_sized_from_the_rate_not_the_dataset(tmp_path):
    conf = _conf(tmp_path, "rgat", "Offline", "min_duration = 1000", "target_qps = 100")
    plan, settings = _audit("rgat", "Offline", conf, "TEST01")
    assert int(settings.min_query_count) == 788379  # mlperf.conf: one query of every IGBH validation paper
    assert calibrate_dev.audit_counts(plan, settings) is None  # TEST01's config sets no count
    sized = calibrate_dev.size(plan, settings, 64, floor=1)
    assert int(settings.min_query_count) == 110 == int(settings.performance_sample_count_override)  # 1.1 x 1 s x 100
    assert sized["message"].startswith("development audit run, sized as the performance run it audits")
    assert "the official duration (no --min-duration-ms" in sized["message"] and sized["message"] in plan.not_submittable


@pytest.mark.parametrize("scenario, official", [("SingleStream", 100), ("Offline", 248)])
def test_wan_test04_gets_the_performance_runs_counts_back(tmp_path, scenario, official):
    expected = "target_latency = 50" if scenario == "SingleStream" else "target_qps = 2"
    plan, settings = _audit(WAN, scenario, _conf(tmp_path, WAN, scenario, "min_duration = 1000", expected), "TEST04")
    assert int(settings.min_query_count) == 20  # the audit config's, meant for ten minutes
    message = calibrate_dev.audit_counts(plan, settings)
    assert int(settings.min_query_count) == official  # LoadGen's SingleStream default; mlperf.conf's Offline
    assert f"min_query_count 20 -> {official}" in message and "restores the audit config's counts" in message
    assert message in plan.not_submittable
    sized = calibrate_dev.size(plan, settings, 13, floor=1)
    if scenario == "Offline":  # 1.1 x 1 s x 2/s: 2 samples, but TEST04's sample 3 stays loaded
        assert int(settings.min_query_count) == 2 and int(settings.performance_sample_count_override) == 4
        assert sized is not None
    else:
        assert int(settings.performance_issue_same_index) == 3 and int(settings.performance_issue_same) == 1


def test_a_count_the_user_stated_is_kept_for_the_audits(tmp_path):
    conf = _conf(tmp_path, WAN, "Offline", "min_duration = 1000", "target_qps = 2", "min_query_count = 64")
    plan, settings = _audit(WAN, "Offline", conf, "TEST04")
    calibrate_dev.audit_counts(plan, settings)
    assert calibrate_dev.size(plan, settings, 13, floor=1) is None
    assert int(settings.min_query_count) == 64  # the performance run's, not the audit config's 20


def test_the_flags_of_a_development_audit_size_it_too(tmp_path):
    # a user.conf stating the expected rate is the user's: calibration writes none, the flags reach the audit
    conf = _conf(tmp_path, WAN, "SingleStream", "target_latency = 50")
    plan, settings = _audit(WAN, "SingleStream", conf, "TEST04", min_duration_ms=1000)
    assert calibrate_dev.audit_counts(plan, settings) is not None and int(settings.min_query_count) == 100


@pytest.mark.parametrize("model, scenario, test, lines", [
    (WAN, "Offline", "TEST04", ("target_qps = 2",)),  # the official duration: the audit config's 20 stand
    (WAN, "SingleStream", "TEST04", ("min_duration = 600000",)),
    ("e2e-rag-qna", "Offline", "TEST09", ("min_duration = 1000",)),  # its own duration (0) and count of responses
])
def test_official_audits_and_audits_with_their_own_duration_keep_their_lines(tmp_path, model, scenario, test, lines):
    plan, settings = _audit(model, scenario, _conf(tmp_path, model, scenario, *lines), test)
    before = {key: int(getattr(settings, key)) for key in (*calibrate_dev.SIZE_KEYS, "min_duration_ms")}
    reasons = list(plan.not_submittable)
    assert calibrate_dev.audit_counts(plan, settings) is None
    settings.offline_expected_qps = 100.0
    assert calibrate_dev.size(plan, settings, 13, floor=1) is None
    assert {key: int(getattr(settings, key)) for key in before} == before and plan.not_submittable == reasons
