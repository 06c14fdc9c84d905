"""gpt-oss-120b task: the synthetic set's official layout, Harmony prompts as openai-harmony renders them, and
exact_match byte-identical to the official eval_mlperf_accuracy.py on a perturbed (non-oracle) log, and the tiny
random GptOss generating Offline and Server with token latencies.

``tests/fixtures/gpt_oss/``: a 9-sample accuracy file and its tokenizer (``mlharness dataset synth gpt-oss``), an
accuracy log of hand-perturbed answers (wrong letters, a wrong integer, bold and ``ANSWER:`` forms, an answer cut
off before its final channel, a qsl_idx outside the file) and ``eval_mlperf_accuracy.stdout.txt``, the official
script's stdout on them (language/gpt-oss-120b, MLCommons inference v6.1). ``tests/fixtures/gpt_oss/lcb/``: the
same for LiveCodeBench (right, wrong and crashing programs, code found only in the analysis channel, functional
problems, repeats) with MATH500, AIME and GPQA answers, the problems' tests in ``lcb_tests.json``, the official
stdout and its per-entry verdicts (``make_fixture.py`` writes the input).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.cli import cli

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
harmony_pkg = pytest.importorskip("openai_harmony")

FIXTURES = Path(__file__).parent / "fixtures" / "gpt_oss"
LCB = FIXTURES / "lcb"


def test_synth_writes_the_official_layout(env, tmp_path):
    out = tmp_path / "set"
    proc = cli(env, "dataset", "synth", "gpt-oss", "--out", str(out), "--count", "5")
    assert proc.returncode == 0, proc.stderr
    sizes = {}
    for name in ("acc/acc_eval_inputs.parquet", "perf/perf_eval_ref.parquet", "acc/acc_eval_compliance_gpqa.parquet"):
        frame = pd.read_parquet(out / name)
        sizes[name] = len(frame)
        assert {"dataset", "ground_truth", "tok_input"} <= set(frame.columns)
    assert set(sizes.values()) == {5}
    acc = pd.read_parquet(out / "acc/acc_eval_inputs.parquet")
    perf = pd.read_parquet(out / "perf/perf_eval_ref.parquet")
    gpqa = pd.read_parquet(out / "acc/acc_eval_compliance_gpqa.parquet")
    assert set(acc["dataset"]) == {"gpqa_diamond", "aime25", "mmlu_pro", "livecodebench_v6", "math500"}
    assert set(gpqa["dataset"]) == {"gpqa_diamond"}
    code_rows = acc[acc["dataset"] == "livecodebench_v6"]
    assert all(json.loads(t)["inputs"] for t in code_rows["lcb_tests"]) and code_rows["ground_truth"].is_unique
    # accuracy prompts reason hard, performance prompts lightly (the reference's generation configs)
    assert all("Reasoning: high" in t for t in acc["text_input"])
    assert all("Reasoning: low" in t for t in perf["text_input"])
    from mlharness.tasks.gpt_oss.dataset import load_tokenizer

    tok = load_tokenizer(out / "tokenizer")
    for text, ids in zip(acc["text_input"], acc["tok_input"], strict=True):
        assert tok.decode(list(ids), skip_special_tokens=False) == text
        assert text.endswith("<|end|><|start|>assistant") and ids[0] == tok.convert_tokens_to_ids("<|start|>")
    # reference answers average the length TEST09 expects
    mean = np.mean([len(tok.encode(t, add_special_tokens=False)) for t in acc["ref_output"]])
    assert 1150.38 <= mean <= 1406.02


def _o200k_available() -> bool:
    base = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    return bool(base) and (Path(base) / "o200k_base.tiktoken").is_file()


def test_prompt_text_is_what_openai_harmony_renders():
    from mlharness.tasks.gpt_oss import harmony

    for effort, instructions in (("high", "Answer with the letter of the correct option (A-D)."), ("low", None)):
        conv = harmony.conversation("Which quantity matters?\n\nA) x\nB) y", effort, instructions)
        text = harmony.render_plain(conv)
        assert text.startswith("<|start|>system<|message|>You are ChatGPT") and f"Reasoning: {effort}" in text
        assert text.endswith("<|start|>user<|message|>Which quantity matters?\n\nA) x\nB) y<|end|><|start|>assistant")
        if not _o200k_available():
            continue
        enc = harmony_pkg.load_harmony_encoding(harmony_pkg.HarmonyEncodingName.HARMONY_GPT_OSS)
        ids = enc.render_conversation_for_completion(conv, harmony_pkg.Role.ASSISTANT)
        assert enc.decode_utf8(ids) == text
    if not _o200k_available():
        pytest.skip("openai-harmony's own rendering needs o200k_base.tiktoken (TIKTOKEN_ENCODINGS_BASE); the "
                    "plain rendering was checked for its layout only")


def test_accuracy_is_byte_identical_to_the_official_script(env):
    proc = cli(env, "accuracy", "gpt-oss", "--log", str(FIXTURES / "mlperf_log_accuracy.json"), "--reference-data",
               str(FIXTURES / "acc_eval_inputs.parquet"), "--tokenizer", str(FIXTURES / "tokenizer"))
    assert proc.returncode == 0, proc.stderr
    official = (FIXTURES / "eval_mlperf_accuracy.stdout.txt").read_text()
    assert proc.stdout == official
    assert "'exact_match': 63.522" in proc.stdout.splitlines()


def test_livecodebench_accuracy_is_byte_identical_to_the_official_script(env):
    proc = cli(env, "accuracy", "gpt-oss", "--log", str(LCB / "mlperf_log_accuracy.json"), "--reference-data",
               str(LCB / "acc_eval_inputs.parquet"), "--tokenizer", str(FIXTURES / "tokenizer"), "--lcb-tests",
               str(LCB / "lcb_tests.json"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (LCB / "eval_mlperf_accuracy.stdout.txt").read_text()
    assert "livecodebench_v6                 7       14        3       2.33     50.00%" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "'exact_match': 49.464"


def test_livecodebench_verdicts_per_entry_and_tests_from_a_column(tmp_path):
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.gpt_oss.metric import GptOssExactMatchMetric, score_log

    official = json.loads((LCB / "official_verdicts.json").read_text())
    result = score_log(LCB / "mlperf_log_accuracy.json", LCB / "acc_eval_inputs.parquet", FIXTURES / "tokenizer",
                       LCB / "lcb_tests.json")
    assert result.details["verdicts"] == [official[str(i)] for i in range(len(official))]
    assert result.details["programs_run"] == 13  # as the official "Evaluating 13 ... code samples"; no code: wrong
    # the same tests in an lcb_tests column (as the synthetic set writes them), found without a tests file
    tests = json.loads((LCB / "lcb_tests.json").read_text())
    frame = pd.read_parquet(LCB / "acc_eval_inputs.parquet")
    frame["lcb_tests"] = [json.dumps(tests[t]) if t in tests else None for t in frame["ground_truth"]]
    (tmp_path / "acc").mkdir()
    frame.to_parquet(tmp_path / "acc" / "acc_eval_inputs.parquet", index=False)
    again = score_log(LCB / "mlperf_log_accuracy.json", tmp_path / "acc" / "acc_eval_inputs.parquet",
                      FIXTURES / "tokenizer")
    assert again.text == result.text
    # the metric reads lcb_tests.json beside the data files when the file has no column
    frame.drop(columns="lcb_tests").to_parquet(tmp_path / "acc" / "acc_eval_inputs.parquet", index=False)
    (tmp_path / "lcb_tests.json").write_text(json.dumps(tests))
    ctx = AccuracyContext(dataset_path=tmp_path, count=len(frame),
                          options={"tokenizer": str(FIXTURES / "tokenizer")})
    assert GptOssExactMatchMetric().score(LCB / "mlperf_log_accuracy.json", ctx).text == result.text


def test_livecodebench_without_tests_is_refused_naming_the_problem(tmp_path):
    from mlharness.errors import AccuracyError
    from mlharness.tasks.gpt_oss.metric import score_log

    with pytest.raises(AccuracyError, match=r"row 0 is a LiveCodeBench problem \(question_id 'lcb_add_1'\) "
                                            r"without tests.*--lcb-tests"):
        score_log(LCB / "mlperf_log_accuracy.json", LCB / "acc_eval_inputs.parquet", FIXTURES / "tokenizer")
    partial = json.loads((LCB / "lcb_tests.json").read_text())
    del partial["lcb_even_2"]
    (tmp_path / "tests.json").write_text(json.dumps(partial))
    with pytest.raises(AccuracyError, match=r"row 7 .*'lcb_even_2'.*tests file .*tests.json has none"):
        score_log(LCB / "mlperf_log_accuracy.json", LCB / "acc_eval_inputs.parquet", FIXTURES / "tokenizer",
                  tmp_path / "tests.json")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(AccuracyError, match="bad.json: expected a JSON object question_id -> tests"):
        score_log(LCB / "mlperf_log_accuracy.json", LCB / "acc_eval_inputs.parquet", FIXTURES / "tokenizer",
                  tmp_path / "bad.json")


def test_oracle_answers_of_the_synthetic_set_score_100(small_set, tmp_path):
    from mlharness.tasks.gpt_oss.dataset import load_tokenizer
    from mlharness.tasks.gpt_oss.metric import score_log
    from mlharness.tasks.gpt_oss.synth import encode

    acc = small_set / "acc/acc_eval_inputs.parquet"
    tok = load_tokenizer(small_set / "tokenizer")
    entries = [{"seq_id": i, "qsl_idx": i, "token_count": 0,
                "data": np.asarray(encode(tok, text), "<i4").tobytes().hex().upper()}
               for i, text in enumerate(pd.read_parquet(acc)["ref_output"])]
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps(entries))
    result = score_log(log, acc, small_set / "tokenizer")
    assert result.value == 100.0 and result.details["programs_run"] == 1, result.text
    assert set(result.details["per_dataset"]) == {"gpqa_diamond", "aime25", "mmlu_pro", "livecodebench_v6",
                                                  "math500"}


def test_test09_and_test07_verdicts_on_cut_logs(tmp_path):
    from mlharness.submission import test07, test09
    from mlharness.tasks.gpt_oss.metric import score_log

    entries = json.loads((FIXTURES / "mlperf_log_accuracy.json").read_text())
    config9 = Path("mlharness/audit/TEST09/gpt-oss-120b/audit.config")
    r = test09.verify(FIXTURES / "mlperf_log_accuracy.json", config9)
    assert not r.passed and r.lengths == [len(bytes.fromhex(e["data"])) // 4 for e in entries]
    assert r.text().splitlines()[-1] == "TEST FAIL"
    r7 = test07.verify(FIXTURES / "mlperf_log_accuracy.json", Path("mlharness/audit/TEST07/gpt-oss-120b/audit.config"),
                       lambda log: score_log(log, FIXTURES / "acc_eval_inputs.parquet", FIXTURES / "tokenizer"))
    assert r7.score == 63.522 and r7.threshold == 60.698 and r7.passed


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic set of 8 samples per file (the cache's default set has 24 with long reference answers)."""
    from mlharness.tasks.gpt_oss.synth import write_synthetic_gpt_oss

    return write_synthetic_gpt_oss(tmp_path_factory.mktemp("gpt-oss-small"), count=8)


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_random_model_runs_with_token_latencies(env, tmp_path, small_set, scenario):
    out = tmp_path / scenario
    proc = cli(env, "run", "--manifest", "gpt-oss-120b-random", "--scenario", scenario, "--mode", "performance",
               "--dataset-path", str(small_set), "--output", str(out), "--no-progress", "--no-calibrate",
               "--min-duration-ms", "100",
               "--min-query-count", "8", "--target-qps", "4" if scenario == "Server" else "20")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "mlperf_log_summary.txt").read_text()
    key = "Completed tokens per second" if scenario == "Server" else "Tokens per second"
    assert re.search(rf"^{key}\s*:\s*[\d.]+", summary, re.M), summary
    if scenario == "Server":
        assert "first token latency" in summary.lower() and "time to output token" in summary.lower(), summary
