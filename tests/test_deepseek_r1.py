"""deepseek-r1: the official dataset layout and the synthetic set, the oracle at exact_match 100 through LoadGen,
and accuracy exactly as the official language/deepseek-r1/eval_accuracy.py prints it (fixture: its output on a
non-oracle log), every per-dataset grader included."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.llm_submission import pattern_values

pytest.importorskip("pandas")
pytest.importorskip("pylatexenc")

FIXTURE = Path(__file__).parent / "fixtures" / "deepseek_r1"
# the submission checker's patterns (tools/submission/submission_checker/constants.py ACC_PATTERN)
CHECKER = {"exact_match": r".*'exact_match':\s([\d.]+).*", "TOKENS_PER_SAMPLE": r".*'tokens_per_sample':\s([\d.]+).*"}
# the columns eval_accuracy.py and run_mlperf.py read
OFFICIAL_COLUMNS = {"dataset", "question", "text_input", "tok_input", "ground_truth"}


def checker_values(text: str) -> dict[str, float]:
    return pattern_values(text, CHECKER)


def test_synthetic_set_has_the_official_layout(run_cli, tmp_path):
    import pandas as pd
    from transformers import AutoTokenizer

    from mlharness.tasks.deepseek_r1.graders import kind_of

    out = tmp_path / "set"
    proc = run_cli("dataset", "synth", "deepseek-r1", "--out", str(out), "--count", "10")
    assert proc.returncode == 0, proc.stderr
    with (out / "mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl").open("rb") as f:
        frame = pickle.load(f)
    assert isinstance(frame, pd.DataFrame) and len(frame) == 10 and OFFICIAL_COLUMNS <= set(frame.columns)
    assert sorted({kind_of(n) for n in frame["dataset"]}) == ["aime", "gpqa", "livecodebench", "math500", "mmlu_pro"]
    tokenizer = AutoTokenizer.from_pretrained(str(out / "tokenizer"), local_files_only=True)
    for _, row in frame.iterrows():
        assert tokenizer.decode(row["tok_input"], skip_special_tokens=True) == row["text_input"]
        assert row["tok_input_len"] == len(row["tok_input"])
        if row["dataset"] == "livecodebench":  # the ground truth is a question_id; its tests ride along
            tests = json.loads(row["lcb_tests"])
            assert len(tests["inputs"]) == len(tests["outputs"]) >= 3 and row["ground_truth"].startswith("synth")
        elif row["dataset"] in ("gpqa", "mmlu_pro"):
            assert row["ground_truth"] in "ABCDEFGHIJ"
    again = run_cli("dataset", "synth", "deepseek-r1", "--out", str(out), "--count", "10")
    assert again.returncode != 0 and "--force" in again.stderr + again.stdout  # never clobbers a folder


@pytest.mark.parametrize("scenario", ["Offline", "Interactive"])
def test_oracle_scores_100_through_loadgen(run_cli, tmp_path, scenario):
    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", "deepseek-r1-oracle", "--scenario", scenario, "--mode", "accuracy",
                   "--count", "10", "--output", str(out), "--no-progress", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (out / "accuracy.txt").read_text()
    assert text.startswith("\nResults\n\n{'exact_match': 100.0, 'tokens_per_sample': "), text
    values = checker_values(text)
    assert values["exact_match"] == 100.0 and values["TOKENS_PER_SAMPLE"] > 5
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(10))  # two of each of the five kinds
    # the isolation the two LiveCodeBench programs ran under is said and recorded beside accuracy.txt
    recorded = json.loads((out / "mlharness_run.json").read_text())["accuracy"]["code_isolation"]
    assert recorded.startswith(("bubblewrap (", "none (")), recorded
    assert f"LiveCodeBench programs run in {recorded}" in proc.stderr


def test_accuracy_line_is_byte_identical_to_the_official_script(run_cli):
    """The fixture's official_stdout.txt is what eval_accuracy.py printed for this dataset and log: the
    accuracy block is its last lines (LiveCodeBench's own prints come before)."""
    proc = run_cli("accuracy", "deepseek-r1", "--log", str(FIXTURE / "mlperf_log_accuracy.json"), "--dataset-file",
                   str(FIXTURE / "dataset.pkl"), "--tokenizer", str(FIXTURE / "tokenizer"), "--code-timeout", "5",
                   timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    official = (FIXTURE / "official_stdout.txt").read_text()
    assert official.endswith(proc.stdout) and proc.stdout.startswith("\nResults\n\n{'exact_match': ")
    assert proc.stdout.splitlines()[-1] == official.splitlines()[-1]
    assert checker_values(proc.stdout)["exact_match"] < 100  # a non-oracle log


def test_every_verdict_is_the_official_one():
    from mlharness.tasks.deepseek_r1.metric import score_log
    from mlharness.tasks.deepseek_r1.sandbox import Limits

    result = score_log(FIXTURE / "mlperf_log_accuracy.json", FIXTURE / "dataset.pkl", FIXTURE / "tokenizer",
                       limits=Limits(timeout=5))
    official = json.loads((FIXTURE / "official_verdicts.json").read_text())
    assert result.details["scores"] == official["prompt_accuracy"]
    assert result.details["extracted"] == official["extracted_answer"]
    assert result.details["dupes"] == 1 and result.details["num-samples"] == len(official["prompt_accuracy"])


def test_math_grader_agrees_with_prm800k():
    """math_official_verdicts.json: PRM800K's grade_answer on each (given, truth) of math_pairs.json."""
    from mlharness.tasks.deepseek_r1.math_grade import grade_answer

    pairs = json.loads((FIXTURE / "math_pairs.json").read_text())
    official = json.loads((FIXTURE / "math_official_verdicts.json").read_text())
    assert [grade_answer(g, t) for g, t in pairs] == official
    assert grade_answer("1/2", "0.5") and grade_answer("\\frac{1}{2}", "0.5") and not grade_answer("2/4", "1/2")


def test_parsers_take_the_official_answer():
    from mlharness.tasks.deepseek_r1 import graders

    assert graders.parse_choice("I think B. Final answer: (c) because", "D") == "C"
    assert graders.parse_choice("The option is F, clearly.", "J") == "F"  # MMLU-Pro: the last standalone letter
    assert graders.parse_choice("The option is F, clearly.", "D") is None  # GPQA has no fallback
    assert graders.parse_boxed("x \\boxed{\\frac{1}{2}} then \\boxed{\\sqrt{\\frac{3}{4}}}") == "\\sqrt{\\frac{3}{4}}"
    assert graders.parse_integer("\\boxed{1000}") is None and graders.parse_integer("Answer: 7.") is None
    assert graders.parse_code("```python\nprint(1)\n```\n```python\nprint(2)\n```") == "print(1)"
    assert graders.kind_of("aime1983") == "aime"
    from mlharness.errors import AccuracyError

    with pytest.raises(AccuracyError, match="no grader for dataset 'trivia'"):
        graders.kind_of("trivia", "sample 3: ")


def test_a_log_for_another_dataset_or_a_bad_file_is_a_clear_error(tmp_path):
    from mlharness.errors import AccuracyError
    from mlharness.tasks.deepseek_r1.metric import score_log

    bad = tmp_path / "bad.pkl"
    bad.write_bytes(pickle.dumps({"not": "a frame"}))
    with pytest.raises(AccuracyError, match="expected a pickled pandas DataFrame"):
        score_log(FIXTURE / "mlperf_log_accuracy.json", bad, FIXTURE / "tokenizer")
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps([{"qsl_idx": 0, "data": np.asarray([1, 2, 3], "<i2").tobytes().hex()}]))
    with pytest.raises(AccuracyError, match="not whole int32 token ids"):
        score_log(odd, FIXTURE / "dataset.pkl", FIXTURE / "tokenizer")


@pytest.mark.parametrize("name", ["deepseek-r1", "deepseek-r1-oracle", "deepseek-r1-random"])
def test_manifests_name_the_official_benchmark(name):
    from mlharness.manifest.loader import load_manifest

    m = load_manifest(name).model
    assert (m.name, m.mlperf.model, m.mlperf.benchmark) == (name, "deepseek-r1", "deepseek-r1")
    assert m.accuracy.metric == "deepseek_r1_accuracy"


def test_checker_rules_hold_the_official_targets_and_limits():
    from mlharness.submission import llm_rules
    from mlharness.submission.rules import ACC_PATTERNS, compliance_tests_for_model, rules_for

    assert ACC_PATTERNS["exact_match"] == CHECKER["exact_match"]
    assert llm_rules.LLM_ACCURACY_TARGETS["deepseek-r1"] == {"exact_match": 0.99 * 81.3582,
                                                             "TOKENS_PER_SAMPLE": 0.9 * 3886.2274}
    assert llm_rules.LLM_ACCURACY_UPPER["deepseek-r1"] == {"TOKENS_PER_SAMPLE": 1.1 * 3886.2274}
    assert llm_rules.LLM_LATENCY_LIMITS["deepseek-r1"] == {"Server": {"ttft": 2_000_000_000, "tpot": 80_000_000},
                                                           "Interactive": {"ttft": 1_500_000_000,
                                                                           "tpot": 15_000_000}}
    assert llm_rules.conf_model_for("deepseek-r1", "Interactive") == "deepseek-r1-interactive"
    assert compliance_tests_for_model("deepseek-r1") == ("TEST06",)
    bench = rules_for("v6.1").benchmarks["deepseek-r1"]
    assert (bench.dataset_size, bench.accuracy_kind) == (4388, "exact_match")


def test_a_dataset_without_test_cases_reads_them_from_a_json_file(tmp_path, run_cli):
    """The official pickle has no LiveCodeBench tests: they come from a question_id -> tests file; a code
    answer whose tests are nowhere is wrong, as the reference scores a question_id it cannot find."""
    import pandas as pd

    frame = pd.read_pickle(FIXTURE / "dataset.pkl")
    tests = {row["ground_truth"]: json.loads(row["lcb_tests"]) for _, row in frame.iterrows()
             if isinstance(row["lcb_tests"], str)}
    frame.drop(columns=["lcb_tests"]).to_pickle(tmp_path / "official_layout.pkl")
    (tmp_path / "tests.json").write_text(json.dumps(tests))
    args = ["accuracy", "deepseek-r1", "--log", str(FIXTURE / "mlperf_log_accuracy.json"), "--dataset-file",
            str(tmp_path / "official_layout.pkl"), "--tokenizer", str(FIXTURE / "tokenizer"), "--code-timeout", "5"]
    with_tests = run_cli(*args, "--lcb-tests", str(tmp_path / "tests.json"), timeout=180)
    assert with_tests.returncode == 0, with_tests.stderr[-3000:]
    assert (FIXTURE / "official_stdout.txt").read_text().endswith(with_tests.stdout)
    without = run_cli(*args, timeout=180)
    assert without.returncode == 0 and checker_values(without.stdout)["exact_match"] < checker_values(
        with_tests.stdout)["exact_match"]


def test_a_sample_without_a_dataset_name_scores_0_and_an_unknown_name_is_an_error():
    from mlharness.errors import AccuracyError
    from mlharness.tasks.deepseek_r1.metric import grade_texts

    scores, _, isolation = grade_texts(["ANSWER: A", "ANSWER: A"], [None, "gpqa"], ["A", "A"], [None, None])
    assert scores == [0.0, 100.0] and isolation is None  # no program ran, so no sandbox was asked for
    with pytest.raises(AccuracyError, match="sample 1: no grader for dataset 'squad'"):
        grade_texts(["x", "y"], ["gpqa", "squad"], ["A", "B"], [None, None])
