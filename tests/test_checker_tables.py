"""The official checker's tables, kept as data per round (mlharness/submission/checker_tables/): the required and
optional scenarios `submission check` holds each system type to are those rows for every benchmark of the round,
the min-queries row is held where the checker holds it (Offline; early stopping judges the other scenarios), and
where the checker's accuracy verdict is known to mislead (rgat's percentage against a fraction, dlrm-v3's NE, a
figure with an exponent) its verdict stands and a warning gives the true comparison.

With MLHARNESS_INFERENCE_REPO naming an mlcommons/inference checkout, the kept tables are compared with
MODEL_CONFIG of its submission checker's constants.py."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest

from mlharness.rounds import ROUNDS
from mlharness.submission import checker_tables
from mlharness.submission.checker import Checker
from mlharness.submission.checker_accuracy import check_accuracy_value
from mlharness.submission.checker_logs import check_perf_run
from mlharness.submission.findings import Findings, Row
from mlharness.submission.rules import BENCHMARKS, rules_for
from tests.helpers.loadgen_logs import write_run

KEYS = ("models", "required-scenarios-datacenter", "optional-scenarios-datacenter", "required-scenarios-edge",
        "optional-scenarios-edge", "required-scenarios-datacenter-edge", "optional-scenarios-datacenter-edge",
        "min-queries")


def test_every_round_has_the_checkers_tables_with_their_source():
    assert checker_tables.rounds() == sorted(ROUNDS)
    for name in ROUNDS:
        table = checker_tables.table(name)
        assert table["round"] == name and len(table["commit"]) == 40 and set(KEYS) <= set(table)
        # every benchmark mlharness checks in the round is one of the checker's models
        assert set(rules_for(name).benchmarks) <= set(table["models"]), name


@pytest.mark.parametrize("round_name", sorted(ROUNDS))
def test_the_rules_rows_are_the_checkers_rows(round_name):
    table, rules = checker_tables.table(round_name), rules_for(round_name)
    for system, key in checker_tables.TABLE_KEYS.items():
        for kind, mine in (("required", rules.required_scenarios), ("optional", rules.optional_scenarios)):
            theirs = {m: tuple(s) for m, s in table[f"{kind}-scenarios-{key}"].items() if m in rules.round.benchmarks}
            assert mine[system] == theirs, (round_name, system, kind)
    # the rows #2654 changed: qwen3-vl needs Offline and one of Server / Interactive in v6.1, Server in v6.0
    dc = "datacenter"
    assert rules_for("v6.1").required_scenarios[dc]["qwen3-vl-235b-a22b"] == ("Offline",)
    assert checker_tables.one_of(rules_for("v6.1").optional_scenarios[dc]["qwen3-vl-235b-a22b"]) == ("Server",
                                                                                                     "Interactive")
    assert set(rules_for("v6.0").required_scenarios[dc]["qwen3-vl-235b-a22b"]) == {"Offline", "Server"}
    # no row for wan-2.2 or e2e-rag under datacenter,edge (the checker stops on such a tree)
    for name in ("wan-2.2-t2v-a14b", "e2e-rag-qna", "e2e-rag-db"):
        assert name not in rules_for("v6.1").required_scenarios["datacenter,edge"]


def test_min_queries_are_held_only_where_early_stopping_does_not_judge():
    assert checker_tables.min_queries("v6.1", "resnet", "Offline") == 1
    for scenario in ("SingleStream", "MultiStream", "Server", "Interactive"):
        assert checker_tables.min_queries("v6.1", "resnet", scenario) is None
    assert checker_tables.min_queries("v6.1", "qwen3.6-27b", "Offline") is None  # no Offline row


def _perf_findings(tmp_path: Path, scenario: str, **detail: object) -> list[str]:
    run = tmp_path / scenario / "performance" / "run_1"
    write_run(run, scenario, 1000.0, **{"effective_min_duration_ms": 600000, "effective_performance_sample_count":
                                        1024, **detail})
    c = Findings(tmp_path)
    c._row = Row("closed", "Acme", "box", "resnet", scenario)
    check_perf_run(c, "closed", BENCHMARKS["resnet"], scenario, run, None)
    return [f.message for f in c.report.findings]


def test_a_query_count_is_a_finding_only_where_the_checker_has_one(tmp_path):
    # a SingleStream count under mlperf.conf's 1024: early stopping judges it, the checker has no finding
    assert not [m for m in _perf_findings(tmp_path, "SingleStream", effective_min_query_count=10) if "Query" in m]
    found = _perf_findings(tmp_path, "Offline", effective_min_query_count=0, effective_samples_per_query=24576)
    assert "Required minimum Query Count not met by user config, Expected=1, Found=0" in found, found
    # an Offline query under mlperf.conf's min_query_count is no finding of the checker's (nor of mlharness's)
    found = _perf_findings(tmp_path, "Offline", effective_min_query_count=1, effective_samples_per_query=30000)
    assert not [m for m in found if "Query" in m or "mlperf.conf" in m], found


def _accuracy(tmp_path: Path, name: str, line: str) -> tuple[list[str], list[str]]:
    c = Findings(tmp_path)
    c._row = Row("closed", "Acme", "box", name, "Offline")
    check_accuracy_value(c, "closed", BENCHMARKS[name], tmp_path, [line])
    return [f.message for f in c.report.errors], [f.message for f in c.report.warnings]


def test_the_checkers_misleading_verdicts_stand_with_the_true_comparison_beside(tmp_path):
    # rgat: 0.9% passes the checker (0.9 >= 0.721), not as a fraction
    errors, warnings = _accuracy(tmp_path, "rgat", "accuracy=0.900%, good=9, total=1000")
    assert not errors and len(warnings) == 1, warnings
    assert "the official checker passes it, the true comparison fails: 0.9% is 0.009 as a fraction" in warnings[0]
    assert _accuracy(tmp_path, "rgat", "accuracy=72.880%, good=7288, total=10000") == ([], [])  # both pass
    # dlrm-v3's NE: 0.95 is worse than the reference (lower is better), which the checker's ">=" passes
    lines = ["metric/lifetime_ne/rating: {ne}", "metric/lifetime_accuracy/rating: 0.70",
             "metric/lifetime_gauc/rating: 0.79"]
    c = Findings(tmp_path)
    c._row = Row("closed", "Acme", "box", "dlrm-v3", "Offline")
    check_accuracy_value(c, "closed", BENCHMARKS["dlrm-v3"], tmp_path, [li.format(ne=0.95) for li in lines])
    assert not c.report.errors and [w.message for w in c.report.warnings] == [
        "DLRM_NE 0.95: the official checker passes it, the true comparison fails: lower is better: the reference "
        f"allows at most {0.86687 / 0.999:.8g}, the checker holds it to at least {0.86687 * 0.999:.8g}"]
    # a figure with an exponent: the checker reads 1.683 from 1.683e-12 and passes it
    c = Findings(tmp_path)
    c._row = Row("closed", "Acme", "box", "dlrm-v3", "Offline")
    text = [lines[0].format(ne=0.8665), lines[1].replace("0.70", "1.683096022810316e-12"), lines[2]]
    check_accuracy_value(c, "closed", BENCHMARKS["dlrm-v3"], tmp_path, text)
    (warning,) = [w.message for w in c.report.warnings]
    assert warning.startswith("DLRM_ACC 1.6831e-12: the official checker passes it, the true comparison fails: the "
                              "checker's pattern stops at the exponent and reads 1.6831"), warning


def test_a_benchmark_without_a_row_for_its_system_type_is_refused_naming_the_checkers_table(tmp_path):
    bench = tmp_path / "results" / "box" / "wan-2.2-t2v-a14b"
    for scenario in ("Offline", "SingleStream"):
        (bench / scenario).mkdir(parents=True)
    checker = Checker(tmp_path / "results", round_name="v6.1")
    checker.check_benchmark("closed", "Acme", {"system_type": "datacenter,edge"}, bench, {})
    messages = [f.message for f in checker.report.errors]
    assert any("wan-2.2-t2v-a14b is not a benchmark of the 'datacenter,edge' category in round v6.1: the checker's "
               "required scenarios for datacenter,edge systems have no row for it" in m for m in messages), messages


@pytest.mark.skipif(not os.environ.get("MLHARNESS_INFERENCE_REPO"), reason="MLHARNESS_INFERENCE_REPO names no "
                    "mlcommons/inference checkout")
def test_the_kept_tables_are_the_official_checkers():
    constants = Path(os.environ["MLHARNESS_INFERENCE_REPO"]) / "tools/submission/submission_checker/constants.py"
    official = runpy.run_path(str(constants))["MODEL_CONFIG"]
    for name in checker_tables.rounds():
        table = checker_tables.table(name)
        assert {k: table[k] for k in KEYS} == {k: official[name][k] for k in KEYS}, name
