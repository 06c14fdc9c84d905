"""``mlharness submission run`` / ``package`` / ``check`` for llama3.1-8b end to end: the real CLI, one real LoadGen
test per process, the token oracle on the synthetic CNN/DailyMail set in the cache (64 samples).

A new user's command with nothing but a short development duration: no user.conf of their own, so every run is
sized by calibration (the package's generic user.conf says 0.5 samples/s for Server and Interactive, which made a
short run last minutes and fail early stopping). Datacenter Offline, Server and Interactive (TEST06 each), and
the edge benchmark (``llama3.1-8b-edge-oracle``: SingleStream and Offline, no audit) into one results tree,
packaged and checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlharness.calibration.explain import summary_sections
from tests.helpers.cli import cli
from tests.helpers.llm_submission import check_development_only, package, run_args, summary_row

pytest.importorskip("rouge_score")
pytest.importorskip("punkt")

pytestmark = pytest.mark.slow

SYSTEM = "llmbox"
DEV = ["--min-duration-ms", "1000"]
OVERRIDES = {"status": "available", "system_type": "datacenter,edge", "cooling": "air",
             "host_memory_configuration": "1x 24 GB", "host_networking_topology": "N/A",
             "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}
DATACENTER = ("llama3.1-8b-oracle", ("Offline", "Server", "Interactive"))
EDGE = ("llama3.1-8b-edge-oracle", ("SingleStream", "Offline"))
# the results folder of each manifest: the official benchmark ID, whatever the variant
BENCHMARK = {"llama3.1-8b-oracle": "llama3.1-8b", "llama3.1-8b-edge-oracle": "llama3.1-8b-edge"}
# the submission checker's patterns for llama3.1-8b (tools/submission/submission_checker/constants.py ACC_PATTERN)
ROUGE = {"rouge1": r".*'rouge1':\s+'?([\d.]+)'?.*", "rouge2": r".*'rouge2':\s+'?([\d.]+)'?.*",
         "rougeL": r".*'rougeL':\s+'?([\d.]+)'?.*", "rougeLsum": r".*'rougeLsum':\s+'?([\d.]+)'?.*"}
GEN_LEN = r".*'gen_len':\s([\d.]+).*"
# (LoadGen model of the conf lines, TTFT and TPOT limits in ms) of the token-latency scenarios
LIMITS = {"Server": ("llama3_1-8b", 2000, 100), "Interactive": ("llama3_1-8b-interactive", 500, 30)}


@pytest.fixture(scope="module")
def tree(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    work = tmp_path_factory.mktemp("llm-submission")
    procs = {}
    for manifest, scenarios in (DATACENTER, EDGE):
        procs[manifest] = cli(env, "submission", "run", "--manifest", manifest,
                              *run_args(work, SYSTEM, scenarios, OVERRIDES), *DEV)
    return {"work": work, "results": work / "results", "procs": procs}


def scenario_dirs(results: Path):
    for manifest, scenarios in (DATACENTER, EDGE):
        for scenario in scenarios:
            yield BENCHMARK[manifest], scenario, results / SYSTEM / BENCHMARK[manifest] / scenario


def test_every_performance_run_is_valid_and_sized_by_calibration(tree):
    for manifest, proc in tree["procs"].items():
        assert proc.returncode == 0, f"{manifest}: {proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    for bench, scenario, scen in scenario_dirs(tree["results"]):
        summary = (scen / "performance" / "run_1" / "mlperf_log_summary.txt").read_text()
        assert re.search(r"^Result is : VALID", summary, re.M), f"{bench}/{scenario}:\n{summary}"
        stats = summary_sections(summary)["stats"]
        # the scenario's user.conf is the one the run used: its last expected-performance line is what LoadGen ran
        conf = (scen / "user.conf").read_text()
        assert "calibrated by mlharness" in conf, conf
        key = "target_latency" if scenario == "SingleStream" else "target_qps"
        stated = float(re.findall(rf"^\S+\.{key} = ([\d.e+-]+)$", conf, re.M)[-1])
        # (SingleStream's summary states the expected latency as its inverse)
        expected_qps = 1000.0 / stated if scenario == "SingleStream" else stated
        assert float(stats["target_qps"]) == pytest.approx(expected_qps, rel=1e-5)
        if scenario in LIMITS:
            model, ttft_ms, tpot_ms = LIMITS[scenario]
            assert f"{model}.Server.target_qps = " in conf  # Interactive: the '-interactive' settings
            assert stated > 0.5  # not the package's generic rate
            # the oracle meets the scenario's own TTFT/TPOT limits at the calibrated rate
            assert float(stats["ttft_latency (ns)"]) == ttft_ms * 1e6
            assert float(stats["tpot_latency (ns)"]) == tpot_ms * 1e6
            assert float(stats["99.00 percentile first token latency (ns)"]) < ttft_ms * 1e6
            assert float(stats["99.00 percentile time to output token (ns)"]) < tpot_ms * 1e6


def test_accuracy_is_rouge_100_in_the_form_the_checker_reads(tree):
    for bench, scenario, scen in scenario_dirs(tree["results"]):
        text = (scen / "accuracy" / "accuracy.txt").read_text()
        found = {k: float(m.group(1)) for line in text.splitlines() for k, p in ROUGE.items()
                 if (m := re.match(p, line))}
        assert found == dict.fromkeys(ROUGE, 100.0), f"{bench}/{scenario}: {text}"
        assert any(re.match(GEN_LEN, line) for line in text.splitlines()), text


def test_test06_passes_and_no_other_audit_ran(tree):
    for bench, scenario, scen in scenario_dirs(tree["results"]):
        assert not (scen / "TEST01").exists() and not (scen / "TEST04").exists()
        if bench == BENCHMARK[EDGE[0]]:
            assert not (scen / "TEST06").exists()  # the edge benchmark has no compliance test
            continue
        lines = (scen / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
        first = "Skipped" if scenario == "Offline" else "True"  # Offline has no first token to check
        assert lines == [f"First token check pass: {first}", "EOS check pass: True",
                         "Sample length check pass: True", "TEST06 verification complete"], lines


def test_package_checks_with_only_development_findings(tree, env):
    out = package(env, tree)
    for bench, scenario, _ in scenario_dirs(tree["results"]):
        acc = out / "open" / "Acme" / "results" / SYSTEM / bench / scenario / "accuracy" / "accuracy.txt"
        assert re.search(r"^hash=[0-9a-f]{64}$", acc.read_text(), re.M)
    # without the allowance the very same findings are the problems, and nothing else
    stdout = check_development_only(env, out, "min_duration is 1000 ms")
    for bench, scenario, _ in scenario_dirs(tree["results"]):
        row = summary_row(stdout, bench, scenario)
        assert "ROUGE1 100" in row, stdout
        if bench == BENCHMARK[DATACENTER[0]]:
            assert "TEST06 PASS" in row, row
