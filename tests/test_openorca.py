"""llama2-70b-99.9 on OpenOrca: the official pickle layout and Llama 2 prompts, ROUGE byte for byte as the official
evaluate-accuracy.py prints it, the token oracle at its maximum, and the checker's rules, tokens-per-sample band
included. The random model and the submission path are in test_openorca_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rouge_score")
pytest.importorskip("punkt")
pd = pytest.importorskip("pandas")
from tests.helpers.llm_submission import pattern_values  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "openorca"
PICKLE = "open_orca_gpt4_tokenized_llama.sampled_24576.pkl"
# The columns processorca.py leaves, in its order, and the two Llama 2 prompt forms it builds (written out here).
COLUMNS = ["id", "system_prompt", "question", "output", "input", "tok_input", "tok_output", "origin",
           "tok_input_length", "tok_output_length"]
WITH_SYSTEM = "<s>[INST] <<SYS>>\n{}\n<</SYS>>\n\n{} [/INST]"
NO_SYSTEM = "<s>[INST] {} [/INST]"
# The submission checker's patterns for llama2-70b-99.9 (constants.py ACC_PATTERN)
CHECKER = {"ROUGE1": r".*'rouge1':\s+'?([\d.]+)'?.*", "ROUGE2": r".*'rouge2':\s+'?([\d.]+)'?.*",
           "ROUGEL": r".*'rougeL':\s+'?([\d.]+)'?.*", "TOKENS_PER_SAMPLE": r".*'tokens_per_sample':\s([\d.]+).*"}


def checker_values(text: str) -> dict[str, float]:
    return pattern_values(text, CHECKER)


def test_synthetic_set_has_the_official_layout(run_cli, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "orca"
    proc = run_cli("dataset", "synth", "openorca", "--out", str(out), "--count", "9")
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_pickle(out / PICKLE)
    assert list(frame.columns) == COLUMNS and len(frame) == 9 and list(frame.index) == list(range(9))
    assert {c: str(frame[c].dtype) for c in COLUMNS} == {
        c: "int64" if c.endswith("_length") else "object" for c in COLUMNS}
    tokenizer = AutoTokenizer.from_pretrained(str(out / "tokenizer"), local_files_only=True)
    assert (tokenizer.convert_tokens_to_ids(["<unk>", "<s>", "</s>"]), tokenizer.eos_token_id) == ([0, 1, 2], 2)
    response_init = tokenizer.convert_tokens_to_ids("\u2581")
    forms = set()
    for row in frame.itertuples(index=False):
        template = WITH_SYSTEM.format(row.system_prompt, row.question) if row.system_prompt else NO_SYSTEM.format(
            row.question)
        forms.add(bool(row.system_prompt))
        assert row.input == template and isinstance(row.tok_input, list)
        assert row.tok_input == tokenizer(row.input)["input_ids"] + [response_init]
        assert row.tok_input[:2] == [1, 1]  # the tokenizer's BOS, then the prompt's own "<s>"
        assert row.tok_output == tokenizer(row.output)["input_ids"] and row.tok_output[0] == 1
        assert (row.tok_input_length, row.tok_output_length) == (len(row.tok_input), len(row.tok_output))
        assert row.id.split(".")[0] == row.origin and row.origin in ("cot", "flan", "niv", "t0")
        assert tokenizer.decode(row.tok_output, skip_special_tokens=True) == row.output
    assert forms == {True, False} and set(frame["origin"]) == {"cot", "flan", "niv", "t0"}
    again = run_cli("dataset", "synth", "openorca", "--out", str(out), "--count", "9")
    assert again.returncode == 2, again.stderr  # an existing set is not overwritten without --force


def test_accuracy_line_is_byte_identical_to_the_official_script(run_cli):
    """A perturbed log (words dropped, changed, truncated, another sample's answer, a duplicate response):
    tests/fixtures/openorca/evaluate-accuracy.out is what the official evaluate-accuracy.py printed for it."""
    proc = run_cli("accuracy", "openorca", "--log", str(FIXTURES / "mlperf_log_accuracy.json"), "--dataset-file",
                   str(FIXTURES / PICKLE), "--tokenizer", str(FIXTURES / "tokenizer"))
    assert proc.returncode == 0, proc.stderr
    official = (FIXTURES / "evaluate-accuracy.out").read_text()
    assert proc.stdout == official
    values = checker_values(proc.stdout)
    assert set(values) == set(CHECKER) and 30 < values["ROUGE1"] < 100


def test_metric_errors_name_what_is_wrong(tmp_path):
    from mlharness.errors import AccuracyError, DatasetError
    from mlharness.tasks.openorca.dataset import OpenOrca
    from mlharness.tasks.openorca.metric import score_log

    bad = tmp_path / PICKLE
    pd.DataFrame({"input": ["a"], "output": ["b"]}).to_pickle(bad)
    with pytest.raises(DatasetError, match="lacks the column.*tok_input"):
        OpenOrca(bad)
    pd.to_pickle({"tok_input": [[1, 2]]}, bad)
    with pytest.raises(DatasetError, match="expected a pickled pandas DataFrame, found dict"):
        OpenOrca(bad)
    pd.DataFrame({"tok_input": [[1, 2], ["x"]], "output": ["a", "b"]}).to_pickle(bad)
    with pytest.raises(DatasetError, match="row 1: 'tok_input' must be a non-empty list of integer token ids"):
        OpenOrca(bad)
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([{"seq_id": 0, "qsl_idx": 99, "data": "01000000", "token_count": 1}]))
    with pytest.raises(AccuracyError, match="outside the 12 samples"):
        score_log(log, FIXTURES / PICKLE, FIXTURES / "tokenizer")


def synthetic_frame_in(cache: Path):
    return pd.read_pickle(cache / "openorca_synth" / PICKLE)


@pytest.mark.parametrize("scenario", ["Offline", "Interactive"])
def test_oracle_scores_its_maximum(run_cli, tmp_path, cli_env, scenario):
    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", "llama2-70b-99.9-oracle", "--scenario", scenario, "--mode", "accuracy",
                   "--count", "8", "--output", str(out), "--no-progress", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (out / "accuracy.txt").read_text()
    frame = synthetic_frame_in(Path(cli_env["MLHARNESS_CACHE"]))
    # each answer is the reference tok_output without its BOS, then EOS: as many tokens as tok_output
    want_tps = round(sum(len(t) for t in frame["tok_output"][:8]) / 8, 1)
    assert checker_values(text) == {"ROUGE1": 100.0, "ROUGE2": 100.0, "ROUGEL": 100.0,
                                    "TOKENS_PER_SAMPLE": want_tps}, text
    assert "'rougeLsum': 100.0" in text and "'gen_num': 8" in text
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    for e in entries:
        ids = np.frombuffer(bytes.fromhex(e["data"]), np.int32).tolist()
        assert ids == frame["tok_output"][e["qsl_idx"]][1:] + [2]


def test_manifests():
    from mlharness.manifest.loader import load_manifest

    for name in ("llama2-70b-99.9", "llama2-70b-99.9-oracle", "llama2-70b-99.9-random"):
        m = load_manifest(name).model
        assert (m.name, m.mlperf.model, m.mlperf.benchmark) == (name, "llama2-70b", "llama2-70b-99.9")
        assert m.response.element_type == "int32" and m.accuracy.metric == "openorca_rouge"
        assert m.accuracy.options["dataset_file"] == PICKLE and m.accuracy.options["dtype"] == "int32"
        assert m.generation.min_new_tokens >= 2
    assert load_manifest("llama2-70b-99.9").model.generation.max_new_tokens == 1024  # the reference's limit
    assert load_manifest("llama2-70b-99.9@openai").model.framework.name == "openai"
    assert load_manifest("llama2-70b-99.9@vllm").model.framework.name == "vllm"


def test_checker_rules_for_llama2():
    from mlharness.submission.llm_rules import (
        INTERACTIVE_MODEL,
        LLM_LATENCY_LIMITS,
        LLM_MODELS,
        conf_model_for,
    )
    from mlharness.submission.rules import compliance_tests_for_model

    assert conf_model_for("llama2-70b", "Interactive") == INTERACTIVE_MODEL["llama2-70b"] == "llama2-70b-interactive"
    assert LLM_MODELS["llama2-70b"] == LLM_MODELS["llama2-70b-interactive"] == "llama2-70b-99.9"
    assert LLM_LATENCY_LIMITS["llama2-70b-99.9"] == {"Server": {"ttft": 2_000_000_000, "tpot": 200_000_000},
                                                     "Interactive": {"ttft": 450_000_000, "tpot": 40_000_000}}
    assert compliance_tests_for_model("llama2-70b") == compliance_tests_for_model("llama2-70b-interactive") == (
        "TEST06",)


@pytest.mark.parametrize("tps, problem", [
    (294.4, None), (265.1, None), (323.8, None),
    (265.0, "TOKENS_PER_SAMPLE 265 is below the closed-division target 265.005"),
    (324.0, "TOKENS_PER_SAMPLE 324 is above the upper limit 323.895"),
    (42.9, "TOKENS_PER_SAMPLE 42.9 is below")])
def test_tokens_per_sample_band_is_checked(tmp_path, tps, problem):
    """The closed division holds tokens_per_sample within 0.9-1.1x of the reference's 294.45."""
    from mlharness.submission.checker_llm import check_llm_accuracy
    from mlharness.submission.findings import Row
    from mlharness.submission.rules import Benchmark

    class Recorder:  # what check_llm_accuracy records into: the row and the errors
        def __init__(self):
            self.row = Row("closed", "Acme", "box", "llama2-70b-99.9", "Offline")
            self.errors: list[str] = []

        def error(self, path, message):
            self.errors.append(message)

    info = Benchmark("llama2-70b-99.9", "llama2-70b", 24576, "ROUGE1", 44.4312 * 0.999, 0.1, ("TEST06",))
    text = (f"\nResults\n\n{{'rouge1': 44.5, 'rouge2': 22.1, 'rougeL': 28.7, 'rougeLsum': 42.0, 'gen_len': 1, "
            f"'gen_num': 24576, 'gen_tok_len': 1, 'tokens_per_sample': {tps}}}\n")
    closed = Recorder()
    check_llm_accuracy(closed, "closed", info, tmp_path, text.splitlines())
    if problem is None:
        assert closed.errors == []
    else:
        assert len(closed.errors) == 1 and problem in closed.errors[0], closed.errors
    assert "TOKENS_PER_SAMPLE" in closed.row.accuracy
    opened = Recorder()
    check_llm_accuracy(opened, "open", info, tmp_path, text.splitlines())
    assert not opened.errors  # the open division has no accuracy target
