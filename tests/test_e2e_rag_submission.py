"""e2e-rag-qna and e2e-rag-db in a submission: ``submission run`` of e2e-rag-qna-oracle (judged by the local judge
server, with TEST09 on the official audit config) and of e2e-rag-db-random (the tiny random embedder building the
synthetic corpus's database, scored and verified against its db manifest), into one results tree, open division,
with no development overrides: the round's settings (one pass over the data set, no minimum duration) and the
synthetic sets' sizes are the only departures, then ``package`` and ``check``, and the official v6.1 checker on the
package with the same findings. The real CLI and LoadGen. The official checker's output on such a tree is kept in
tests/fixtures/e2e_rag/official_checker_output.txt (tests/fixtures/e2e_rag/COMMANDS.md says how)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.helpers.cli import cli
from tests.helpers.judge_server import running_judge
from tests.helpers.llm_submission import (
    lenient_findings,
    needs_official_checker,
    official_constants,
    official_error_lines,
    package,
    run_args,
    run_official,
    strict_errors,
    summary_row,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240),
              pytest.mark.skipif(importlib.util.find_spec("faiss") is None, reason="needs faiss-cpu (the rag extra)")]

SYSTEM = "ragbox"
QUESTIONS, PAGES = 8, 16  # the synthetic set's (dataset synth e2e-rag, seed 0)
OFFICIAL = "https://github.com/mlcommons/inference tools/submission/submission_checker/constants.py"


@pytest.fixture(scope="module")
def tree(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    work = tmp_path_factory.mktemp("e2e-rag-submission")
    common = run_args(work, SYSTEM, ("Offline",))  # no development overrides: the round's settings
    made: dict[str, object] = {"work": work, "results": work / "results"}
    with running_judge() as judge:
        qna = cli({**env, "MLHARNESS_JUDGE_URL": judge.url}, "submission", "run", "--manifest", "e2e-rag-qna-oracle",
                  *common, timeout=180)
    assert qna.returncode == 0, qna.stdout[-3000:] + qna.stderr[-3000:]
    assert judge.requests == QUESTIONS  # the accuracy run's answers, each judged once
    db = cli(env, "submission", "run", "--manifest", "e2e-rag-db-random", *common, timeout=180)
    assert db.returncode == 0, db.stdout[-3000:] + db.stderr[-3000:]
    made.update(qna=qna, db=db, package=package(env, made))
    return made


def _scenario(root: Path, benchmark: str, *rest: str) -> Path:
    return root.joinpath("open", "Acme", "results", SYSTEM, benchmark, "Offline", *rest)


def test_the_runs_are_one_pass_with_the_official_audit(tree):
    assert "not submittable" not in tree["qna"].stdout + tree["db"].stdout  # no development overrides
    assert "TEST09 output length: PASS" in tree["qna"].stdout, tree["qna"].stdout[-2000:]
    root = tree["package"]
    qna_perf = (_scenario(root, "e2e-rag-qna", "performance", "run_1", "mlperf_log_detail.txt")).read_text()
    # the round's settings: min_query_count of the reference's user.conf, no minimum duration
    assert re.search(r'"key": "effective_samples_per_query", "value": 824,', qna_perf)
    assert re.search(r'"key": "effective_min_duration_ms", "value": 0,', qna_perf)
    db_perf = (_scenario(root, "e2e-rag-db", "performance", "run_1", "mlperf_log_detail.txt")).read_text()
    assert re.search(r'"key": "effective_samples_per_query", "value": 2515,', db_perf)
    verify = (_scenario(root, "e2e-rag-qna", "TEST09", "verify_output_len.txt")).read_text()
    assert verify.rstrip().endswith("TEST PASS") and "Mean output tokens: 274.00" in verify, verify
    assert not _scenario(root, "e2e-rag-db", "TEST09").exists()  # e2e-rag-db has no audit


def test_accuracy_txt_is_what_the_checkers_pattern_reads(tree):
    from mlharness.submission.rules import ACC_PATTERNS

    for benchmark, first in (("e2e-rag-qna", "ACCURACY EVALUATION RESULTS"), ("e2e-rag-db", "Accuracy Results:")):
        text = (_scenario(tree["package"], benchmark, "accuracy", "accuracy.txt")).read_text()
        assert first in text
        figures = [m.group(1) for m in map(re.compile(ACC_PATTERNS["E2E_ACCURACY"]).match, text.splitlines()) if m]
        assert figures == ["100.0000"], text  # the checker reads the last match; there is exactly one
    db = (_scenario(tree["package"], "e2e-rag-db", "accuracy", "accuracy.txt")).read_text()
    assert f"Successful: {PAGES}" in db and "MD5 match: PASS" in db and "Manifest verification PASSED" in db, db


FINDINGS = {  # (benchmark, file): finding; the same in ours and the official checker's (test below)
    ("e2e-rag-qna", "accuracy"): f"the accuracy run covers {QUESTIONS} samples; e2e-rag-qna needs the whole "
                                 "dataset (824)",
    ("e2e-rag-qna", "performance/run_1/mlperf_log_detail.txt"): f"performance_sample_count is {QUESTIONS}; at "
                                                                "least 824 required",
    ("e2e-rag-db", "accuracy"): f"the accuracy run covers {PAGES} samples; e2e-rag-db needs the whole dataset (2515)",
    ("e2e-rag-db", "performance/run_1/mlperf_log_detail.txt"): f"performance_sample_count is {PAGES}; at least "
                                                               "2515 required",
}


def test_check_passes_with_only_the_data_sets_sizes_as_findings(env, tree):
    out = tree["package"]
    lenient, tolerated = lenient_findings(env, out)
    expected = {f"{_scenario(Path(), b, f)}: {finding}" for (b, f), finding in FINDINGS.items()}
    assert tolerated == expected, tolerated  # no 600 s finding: the checker waives it for e2e-rag
    assert re.search(r"E2E_ACCURACY 100 .*TEST09 PASS", summary_row(lenient, "e2e-rag-qna", "Offline"))
    assert "E2E_ACCURACY 100" in summary_row(lenient, "e2e-rag-db", "Offline")
    strict, errors = strict_errors(env, out)
    assert strict.returncode == 2 and errors == tolerated, strict.stdout


@needs_official_checker
def test_official_checker_has_the_same_findings(tree):
    root = tree["package"]
    out = run_official(root)
    lines = official_error_lines(out)
    errors = {tuple(line.split(" ", 1)) for line in lines if line.startswith("/")}
    prefix = str(_scenario(root, "X")).rsplit("/X/", 1)[0]
    ours = {(b, f) for b, f in FINDINGS}
    theirs = {(path.removeprefix(prefix + "/").split("/Offline/")[0],
               "accuracy" if "/accuracy/" in path else "performance/run_1/mlperf_log_detail.txt")
              for path, _ in errors}
    assert theirs == ours, errors
    words = {e[1] for e in errors}
    assert words == {f"performance_sample_count, found {QUESTIONS}, needs to be >= 824",
                     f"performance_sample_count, found {PAGES}, needs to be >= 2515",
                     f"accurcy run does not cover all dataset, accuracy samples: {QUESTIONS}, dataset size: 824",
                     f"accurcy run does not cover all dataset, accuracy samples: {PAGES}, dataset size: 2515"}, words
    assert "Test duration less than 600s" not in out and "accuracy score not found" not in out
    kept = (Path(__file__).parent / "fixtures" / "e2e_rag" / "official_checker_output.txt").read_text()
    assert {re.sub(r"^\[[^]]*\] PACKAGE\S+ ", "", line) for line in kept.splitlines()
            if " ERROR] PACKAGE/" in line} == words  # the kept output (COMMANDS.md) says the same


@needs_official_checker
def test_rules_rows_are_the_checkers():
    """The e2e-rag rows of submission/rules.py against the checker's v6.1 constants (OFFICIAL)."""
    from mlharness.submission import rules

    constants = official_constants()
    v61 = constants.MODEL_CONFIG["v6.1"]
    for name in ("e2e-rag-qna", "e2e-rag-db"):
        row = rules.BENCHMARKS[name]
        assert v61["accuracy-target"][name] == (row.accuracy_kind, row.accuracy_target)
        assert v61["dataset-size"][name] == row.dataset_size == rules.OFFLINE_MIN_SPQ[name]
        required = rules.rules_for("v6.1").required_scenarios["datacenter"][name]
        assert v61["required-scenarios-datacenter"][name] == list(required)
        assert all(name not in v61[f"models_TEST0{n}"] for n in (1, 4, 6, 7, 8))
        assert (name in v61["models_TEST09"]) == ("TEST09" in row.compliance)
        assert rules.compliance_tests_for_model(name) == row.compliance
    assert rules.compliance_tests_for_model("e2e-rag-qna") == ("TEST09",)
    line = "Accuracy: 34.1234"  # accuracy_eval.py's accuracy.txt
    ours, theirs = (re.match(p, line) for p in (rules.ACC_PATTERNS["E2E_ACCURACY"],
                                                constants.ACC_PATTERN["E2E_ACCURACY"]))
    assert ours and theirs and ours.group(1) == theirs.group(1) == "34.1234"
