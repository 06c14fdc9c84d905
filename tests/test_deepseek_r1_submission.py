"""``mlharness submission run`` / ``package`` / ``check`` for deepseek-r1 end to end: the real CLI and LoadGen, the
token oracle on the synthetic set in the cache (20 samples, the five kinds, LiveCodeBench programs run in the
sandbox), Offline and Server (datacenter: Offline plus Server or Interactive), TEST06 each, a short development
duration: the tree is filed under the official benchmark ID and checks with only development findings."""

from __future__ import annotations

import re

import pytest

from tests.helpers.llm_submission import check_development_only, package, submission_tree, summary_row

pytest.importorskip("pandas")

pytestmark = pytest.mark.slow

SYSTEM = "dsbox"
SCENARIOS = ("Offline", "Server")


@pytest.fixture(scope="module")
def tree(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return submission_tree(env, tmp_path_factory.mktemp("deepseek-submission"), "deepseek-r1-oracle", SYSTEM,
                           SCENARIOS)


def test_runs_are_valid_exact_match_100_and_test06_passes(tree):
    proc = tree["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for scenario in SCENARIOS:
        scen = tree["results"] / SYSTEM / "deepseek-r1" / scenario
        summary = (scen / "performance" / "run_1" / "mlperf_log_summary.txt").read_text()
        assert re.search(r"^Result is : VALID", summary, re.M), summary
        accuracy = (scen / "accuracy" / "accuracy.txt").read_text()
        assert re.search(r".*'exact_match':\s([\d.]+).*", accuracy).group(1) == "100.0", accuracy
        lines = (scen / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
        assert lines[1:3] == ["EOS check pass: True", "Sample length check pass: True"], lines
        if scenario == "Server":
            conf = (scen / "user.conf").read_text()
            assert "deepseek-r1.Server.target_qps = " in conf


def test_package_checks_with_only_development_findings(tree, env):
    stdout = check_development_only(env, package(env, tree), "deepseek-r1 needs the whole dataset (4388)")
    for scenario in SCENARIOS:
        row = summary_row(stdout, "deepseek-r1", scenario)
        assert "exact_match 100" in row and "TEST06 PASS" in row, stdout
