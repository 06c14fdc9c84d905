"""TEST04 for wan-2.2-t2v-a14b: the official ``compliance/TEST04/audit.config`` byte for byte, and its
``wan-2.2-t2v-a14b.<scenario>.min_query_count = 20`` lines in effect. LoadGen reads an audit config as model
``*`` only, so those lines are the SUT's to load by its model name (compliance/TEST04/README.md), which
``build_test_settings`` does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mlharness.loadgen import settings as lgs
from mlharness.submission.orchestrate import audit_config

# a git repository of mlcommons/inference (bare or not): MLHARNESS_INFERENCE_GIT, else where this machine mirrors it
OFFICIAL = Path(os.environ.get("MLHARNESS_INFERENCE_GIT", "/work/.mirror/mlcommons+inference/repo"))
MODEL = "wan-2.2-t2v-a14b"


def _plan(model: str, scenario: str, audit: Path | None, overrides: lgs.Overrides | None = None) -> lgs.SettingsPlan:
    return lgs.SettingsPlan(model=model, official=True, scenario=scenario, mode="performance", user_conf=None,
                            overrides=overrides or lgs.Overrides(), audit_config=audit)


@pytest.mark.skipif(not OFFICIAL.exists(), reason="MLHARNESS_INFERENCE_GIT names no mlcommons/inference repository")
def test_wan22_test04_audit_config_is_the_official_bytes():
    official = subprocess.run(["git", "-C", str(OFFICIAL), "show", "HEAD:compliance/TEST04/audit.config"],
                              capture_output=True, timeout=60, check=True).stdout
    ours = audit_config("TEST04", MODEL)
    assert ours.parent.name == MODEL and ours.read_bytes() == official
    assert b"wan-2.2-t2v-a14b.SingleStream.min_query_count = 20\n" in official


@pytest.mark.parametrize("scenario", ["Offline", "SingleStream"])
def test_wan22_test04_runs_the_official_twenty_queries(scenario):
    import mlperf_loadgen as lg

    path = audit_config("TEST04", MODEL)
    lgs.check_audit_config(path)
    without = lgs.build_test_settings(_plan(MODEL, scenario, None))
    assert without.min_query_count != 20  # mlperf.conf's own count (248 for Offline)
    settings = lgs.build_test_settings(_plan(MODEL, scenario, path))
    assert settings.min_query_count == 20 and settings.performance_issue_same_index == 3
    # why the SUT must apply them: LoadGen itself reads the same file as model '*', where the lines do not match
    alone = lg.TestSettings()
    alone.scenario, alone.min_query_count = getattr(lg.TestScenario, scenario), 7
    alone.FromConfig(str(path), "*", scenario, 2)
    assert alone.min_query_count == 7 and alone.performance_issue_same == 1
    # a development count from the command line still wins, as over a user.conf
    dev = lgs.build_test_settings(_plan(MODEL, scenario, path, lgs.Overrides(min_query_count=64)))
    assert dev.min_query_count == 64


def test_other_benchmarks_test04_count_is_unchanged():
    path = audit_config("TEST04", "resnet50")
    assert path.parent.name == "TEST04"  # the generic file: no per-model lines
    base = lgs.build_test_settings(_plan("resnet50", "Offline", None)).min_query_count
    assert lgs.build_test_settings(_plan("resnet50", "Offline", path)).min_query_count == base
