"""llama2-70b-99.9 end to end: the tiny random Llama under LoadGen with token latencies, and ``mlharness submission
run`` / ``package`` / ``check`` with the token oracle on the synthetic OpenOrca set in the cache (64 samples):
Offline and Interactive, TEST06 each, a development tree whose only findings are the development settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlharness.loadgen.logs import detail_values
from tests.helpers.llm_submission import check_development_only, package, submission_tree, summary_row

pytest.importorskip("rouge_score")
pytest.importorskip("punkt")
pytest.importorskip("pandas")

pytestmark = pytest.mark.slow

PERF = {"Offline": ["--min-duration-ms", "100", "--min-query-count", "8", "--target-qps", "50"],  # 8 samples
        "Server": ["--min-duration-ms", "300", "--min-query-count", "8", "--target-qps", "20"]}
SYSTEM = "orcabox"
SCENARIOS = ("Offline", "Interactive")


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_random_model_runs_with_token_latencies(run_cli, tmp_path, scenario):
    out = tmp_path / "perf"
    proc = run_cli("run", "--manifest", "llama2-70b-99.9-random", "--scenario", scenario, "--mode", "performance",
                   "--count", "8", "--output", str(out), "--no-progress", *PERF[scenario], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = detail_values(out / "mlperf_log_detail.txt")
    assert not d.get("errors"), d.get("errors")
    assert d["requested_use_token_latencies"] is True
    assert (d.get("result_tokens_per_second") or d.get("result_completed_tokens_per_second") or 0) > 0
    if scenario == "Server":
        assert 0 < d["result_first_token_mean_latency_ns"] < d["result_mean_latency_ns"]
        assert d["result_time_per_output_token_99.00_percentile_ns"] > 0
        # the benchmark's limits, from mlperf.conf's llama2-70b lines
        assert re.search(r"TTFT .*p99 [\d,.]+ ms [≤>] bound 2,000\.00 ms", proc.stdout), proc.stdout
        assert re.search(r"TPOT .*p99 [\d,.]+ ms [≤>] bound 200\.00 ms", proc.stdout), proc.stdout


@pytest.fixture(scope="module")
def tree(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tree = submission_tree(env, tmp_path_factory.mktemp("orca-submission"), "llama2-70b-99.9-oracle", SYSTEM,
                           SCENARIOS)
    proc = tree["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tree


def test_submission_runs_accuracy_performance_and_test06(tree):
    for scenario in SCENARIOS:
        scen = tree["results"] / SYSTEM / "llama2-70b-99.9" / scenario
        text = (scen / "accuracy" / "accuracy.txt").read_text()
        assert "{'rouge1': 100.0, 'rouge2': 100.0, 'rougeL': 100.0, 'rougeLsum': 100.0, " in text
        assert "'gen_num': 64" in text  # the whole synthetic set
        d = detail_values(scen / "performance" / "run_1" / "mlperf_log_detail.txt")
        assert d["requested_use_token_latencies"] is True and d["result_validity"] == "VALID"
        assert d["effective_scenario"] == ("Server" if scenario == "Interactive" else "Offline")
        if scenario == "Interactive":  # a LoadGen Server run under llama2-70b-interactive: its mlperf.conf limits
            assert (d["requested_server_ttft_latency"], d["requested_server_tpot_latency"]) == (450_000_000,
                                                                                              40_000_000)
        lines = (scen / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
        first = "Skipped" if scenario == "Offline" else "True"
        assert lines == [f"First token check pass: {first}", "EOS check pass: True",
                         "Sample length check pass: True", "TEST06 verification complete"], lines
        assert not (scen / "TEST01").exists()


def test_package_checks_with_only_development_findings(tree, env):
    stdout = check_development_only(env, package(env, tree), "min_duration is 1000 ms")
    for scenario in SCENARIOS:
        row = summary_row(stdout, "llama2-70b-99.9", scenario)
        assert "ROUGE1 100" in row and "TEST06 PASS" in row, stdout
