"""e2e-rag-qna's accuracy: byte-identical to the official accuracy_eval.py on a non-oracle run (fixture), the
judge's request as the reference sends it, judge failures as exit 3 naming stage and sample (no hang past the
deadline), the reference's counting on request, and the oracle stage's maximum."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from mlharness.kinds.pipeline.stage import StageContext, StageSpec
from mlharness.tasks.e2e_rag.dataset import read_frames
from mlharness.tasks.e2e_rag.judge import JUDGE_PROMPT, JudgeClient, JudgeError
from mlharness.tasks.e2e_rag.metric import build_results, score_log
from mlharness.tasks.e2e_rag.oracle import rag_oracle
from tests.helpers.judge_server import running_judge

FIX = Path(__file__).parent / "fixtures" / "e2e_rag"
LOG = FIX / "mlperf_log_accuracy.json"


def official_summary() -> str:
    out = (FIX / "accuracy_eval.stdout.txt").read_text()
    start = out.index("\n" + "=" * 80 + "\nACCURACY EVALUATION RESULTS")
    return out[start:out.index("Detailed results saved to")]


def test_the_prompt_is_the_references_bytes():
    assert hashlib.sha256(JUDGE_PROMPT.encode()).hexdigest() == (
        "90ed7299fa5742d70737de902b11bc5b967f95eb5fe41be5880bece048e4580c")


def test_non_oracle_run_prints_the_official_lines_byte_for_byte():
    assert build_results(LOG, read_frames(FIX)) == json.loads((FIX / "results.json").read_text())
    with running_judge() as judge:
        result = score_log(LOG, FIX / "frames_dataset.tsv", {"judge_url": judge.url})
    assert judge.requests == 6
    summary = official_summary()
    assert result.text == summary + (FIX / "accuracy.txt").read_text()
    assert "F1@N:               0.478" in summary and result.value == 50.0


def test_the_judge_is_asked_as_the_reference_asks():
    with running_judge() as judge:
        client = JudgeClient(judge.url, model="judge-m", timeout_s=5)
        assert client.judge("Q?", "1647", "It was 1647.").correct
        assert not client.judge("Q?", "1647", "Unknown").correct
    prompt = JUDGE_PROMPT.format(question="Q?", ground_truth="1647", llm_answer="It was 1647.")
    assert judge.bodies[0] == {"model": "judge-m", "messages": [{"role": "user", "content": prompt}],
                               "temperature": 0.0, "max_tokens": 1024}


@pytest.mark.parametrize("mode", ["malformed", "hang", "trickle", "http500"])
def test_a_judge_failure_exits_3_naming_the_stage_and_the_sample(run_cli, mode):
    questions = read_frames(FIX)
    target = questions[4].query  # one sample's judge call fails; the others are judged
    with running_judge(mode, target=target, hang_s=20) as judge:
        began = time.monotonic()
        with pytest.raises(JudgeError) as failed:
            score_log(LOG, FIX, {"judge_url": judge.url, "judge_timeout_s": 1.5})
        assert time.monotonic() - began < 10  # the deadline, not the server's 20 s hang
        assert failed.value.stage == "judge" and failed.value.sample == 4
        assert failed.value.exit_code == 3 and str(failed.value).startswith("stage 'judge', sample 4: ")
        if mode == "malformed":
            r = run_cli("accuracy", "e2e-rag-qna", "--log", str(LOG), "--dataset-path", str(FIX),
                        "--judge-url", judge.url, "--judge-timeout", "2", timeout=60)
            assert r.returncode == 3 and "stage 'judge', sample 4: no JSON object" in r.stderr + r.stdout
            r = run_cli("accuracy", "e2e-rag-qna", "--log", str(LOG), "--dataset-path", str(FIX),
                        "--judge-url", judge.url, "--judge-errors", "wrong", timeout=60)
            assert r.returncode == 0, r.stderr
            assert "judge errors counted as wrong answers" in r.stdout and ": 1 of 6\n" in r.stdout
            # sample 4's right answer now counts wrong: 2 of 6, as accuracy_eval.py would count it
            assert "  LLM Judge Accuracy: 0.333\n" in r.stdout and r.stdout.endswith("Accuracy: 33.3333\n")


def test_the_oracle_stage_scores_the_maximum(tmp_path):
    questions = read_frames(FIX)
    stage = rag_oracle(StageSpec("oracle", "rag-oracle", {"dataset": "frames_dataset.tsv"}),
                       StageContext(manifest_dir=FIX, cache_dir=tmp_path))
    stage.load()
    records, log = [], []
    for q in questions:
        item = stage.run(q.first_item())
        assert item["response"].dtype.name == "int32" and item["n_tokens"] == 274 == item["response"].size
        records.append({"qsl_idx": q.index, "query_id": 1000 + q.index, "result": item["result"]})
        log.append({"seq_id": q.index, "qsl_idx": q.index, "data": item["response"].tobytes().hex().upper()})
    (tmp_path / "pipeline_results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "mlperf_log_accuracy.json").write_text(json.dumps(log))
    with running_judge() as judge:
        result = score_log(tmp_path / "mlperf_log_accuracy.json", FIX, {"judge_url": judge.url})
    assert "  Precision@N:        1.000\n  Recall@N:           1.000\n  F1@N:               1.000\n" in result.text
    assert result.text.endswith("Accuracy: 100.0000\n") and result.value == 100.0
