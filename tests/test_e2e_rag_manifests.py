"""The built-in e2e-rag manifests by their default commands (the real CLI and LoadGen): e2e-rag-qna-oracle scores
exactly the maximum with the local judge; e2e-rag-qna-random (retrieval, rerank, a tiny random chat LLM through the
predictor stage's chat engine) and e2e-rag-db-random run Offline VALID with only --min-duration-ms, one pass over
their data set as the round's settings ask; the random answers' token counts reach LoadGen."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from tests.helpers.cli import cli
from tests.helpers.judge_server import running_judge

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240),
              pytest.mark.skipif(importlib.util.find_spec("faiss") is None, reason="needs faiss-cpu (the rag extra)")]

QUESTIONS = 8  # the synthetic set's (dataset synth e2e-rag, seed 0)


def _run(env, out, manifest, *extra):
    proc = cli(env, "run", "--manifest", manifest, "--scenario", "Offline", "--output", str(out), "--no-progress",
               *extra, timeout=200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_the_oracle_scores_exactly_the_maximum(env, tmp_path):
    with running_judge() as judge:
        proc = _run({**env, "MLHARNESS_JUDGE_URL": judge.url}, tmp_path / "acc", "e2e-rag-qna-oracle",
                    "--mode", "accuracy")
    assert judge.requests == QUESTIONS
    for line in ("Precision@N:        1.000", "Recall@N:           1.000", "F1@N:               1.000",
                 "LLM Judge Accuracy: 1.000", "Accuracy: 100.0000"):
        assert line in proc.stdout, proc.stdout
    meta = json.loads((tmp_path / "acc" / "mlharness_run.json").read_text())
    assert meta["accuracy"]["value"] == 100.0, meta["accuracy"]


@pytest.mark.parametrize("manifest,samples", [("e2e-rag-qna-random", 824), ("e2e-rag-db-random", 2515)])
def test_random_pipelines_are_valid_with_only_min_duration(env, tmp_path, manifest, samples):
    proc = _run(env, tmp_path / "perf", manifest, "--mode", "performance", "--min-duration-ms", "1000")
    summary = (tmp_path / "perf" / "mlperf_log_summary.txt").read_text()
    assert re.search(r"^Result is : VALID", summary, re.M), summary
    # the round's settings (the reference's user.conf): one pass over the data set, at least
    assert int(re.search(r"^samples_per_query : (\d+)", summary, re.M).group(1)) >= samples, summary
    assert re.search(r"pipeline +\d+ samples \(0 failed\)", proc.stdout), proc.stdout


def test_the_random_answers_token_counts_reach_loadgen(env, tmp_path):
    """An accuracy run of e2e-rag-qna-random, judged by the local judge (the random answers' scores are not the
    point): each logged response is as many int32 ids as the LLM's completion tokens, 2 to 8 (the stage's
    generation settings: min_new_tokens 2, max_new_tokens 8), after the three stages."""
    with running_judge() as judge:
        _run({**env, "MLHARNESS_JUDGE_URL": judge.url}, tmp_path / "acc", "e2e-rag-qna-random", "--mode",
             "accuracy")
    entries = json.loads((tmp_path / "acc" / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(QUESTIONS))
    lengths = {e["qsl_idx"]: len(bytes.fromhex(e["data"])) // 4 for e in entries}
    assert all(2 <= n <= 8 for n in lengths.values()), lengths
    records = [json.loads(line) for line in (tmp_path / "acc" / "pipeline_results.jsonl").read_text().splitlines()]
    assert {r["qsl_idx"] for r in records} == set(range(QUESTIONS))
    for r in records:
        assert [s["stage"] for s in r["stages"]] == ["retrieve", "rerank", "generate"], r["stages"]
        assert r["result"]["answer"] and 1 <= len(r["result"]["retrieved_urls"]) <= 3  # rerank keeps 3 passages
    assert judge.requests == QUESTIONS  # every answer judged


def test_the_answer_prompt_is_the_references():
    """hooks.ANSWER_PROMPT against multi_shot_retrieval.py's generate_answer, read from the official source, and
    the messages built from passages as it builds them from kept documents."""
    import subprocess

    from mlharness.tasks.e2e_rag.hooks import answer_messages

    repo = "/work/.mirror/mlcommons+inference/repo"
    src = subprocess.run(["git", "-C", repo, "show", "HEAD:e2e-rag/multi_shot_retrieval.py"], capture_output=True,
                         text=True, timeout=30)
    if src.returncode != 0:
        pytest.skip("no mirror of mlcommons/inference")
    body = src.stdout.split("def generate_answer(", 1)[1]
    official = body.split('prompt = f"""', 1)[1].split('"""', 1)[0]
    item = {"query": "Q?", "passages": [{"text": "alpha"}, {"text": "beta"}]}
    kept = "".join(f"\n[DOC {i + 1}] {t}\n" for i, t in enumerate(["alpha", "beta"]))
    expected = official.replace("{question}", "Q?").replace("{kept_docs_text}", kept)
    assert answer_messages(item) == [{"role": "user", "content": expected}]
