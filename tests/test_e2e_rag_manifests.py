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


def test_an_accuracy_run_without_its_judge_is_refused_before_the_model_loads(env, tmp_path):
    """Nothing listens at the judge's port: the run stops in its preflight, naming the judge's address and how to
    start one, before any stage loads or any question is answered (exit 2, no accuracy log)."""
    import socket

    with socket.socket() as s:  # a free loopback port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1/chat/completions"
    proc = cli({**env, "MLHARNESS_JUDGE_URL": url}, "run", "--manifest", "e2e-rag-qna-oracle", "--scenario",
               "Offline", "--mode", "accuracy", "--output", str(tmp_path / "acc"), "--no-progress", timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"the judge at {url} does not answer" in proc.stderr, proc.stderr
    assert "mlharness.tasks.e2e_rag.judge_server" in proc.stderr, proc.stderr
    assert not (tmp_path / "acc" / "mlperf_log_accuracy.json").exists()


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


def test_the_real_manifests_generation_through_an_openai_endpoint(env, tmp_path):
    """e2e-rag-qna's own manifest with its two checkpoints swapped for the tiny random ones, the synthetic corpus,
    and its generate stage pointed at a stand-in OpenAI-compatible server: the answering stage is the `openai`
    predictor's chat engine, each request carries the reference's answer prompt and the manifest's sampling and
    reasoning effort, and the server's usage.completion_tokens is each response's length in LoadGen's log."""
    import yaml

    from mlharness.paths import MANIFESTS_DIR
    from tests.helpers.session_server import ChatServer

    doc = yaml.safe_load((MANIFESTS_DIR / "e2e-rag-qna" / "e2e-rag-qna.yaml").read_text())
    stages = {s["name"]: s for s in doc["inputs"][0]["parameters"]["stages"]}  # the multi-shot loop's
    retrieve, rerank = stages["retrieve"], stages["rerank"]
    retrieve["model"] = {"graph_path": "e2e-rag-embedder-random",
                         "generator": "mlharness.kinds.pipeline.models:ensure_random_embedder"}
    retrieve["options"] = {"synthetic_corpus": True, "top_k": 10}
    rerank["model"] = {"graph_path": "e2e-rag-reranker-random",
                       "generator": "mlharness.kinds.pipeline.models:ensure_random_reranker"}
    doc["attributes"] = {"synthetic_e2e_rag": True}
    manifest = tmp_path / "e2e-rag-qna-served.yaml"
    with ChatServer() as server, running_judge() as judge:
        for name in ("plan", "grade", "decide", "generate"):  # replies without JSON: the reference's fallbacks
            stages[name]["options"] = {**stages[name]["options"], "endpoints": [server.url], "model": "chat-model"}
        manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
        _run({**env, "MLHARNESS_JUDGE_URL": judge.url}, tmp_path / "acc", str(manifest), "--mode", "accuracy")
    assert len(server.requests) >= QUESTIONS and judge.requests == QUESTIONS  # plus the warm-up play's
    answers = [r["body"] for r in server.requests
               if r["body"]["messages"][0]["content"].startswith("Answer the question based ONLY on the provided")]
    assert len(answers) >= QUESTIONS  # one answer per question, after the loop's other calls
    body = answers[0]
    assert "[DOC 1]" in body["messages"][0]["content"]
    assert body.get("reasoning_effort") == "medium" and body.get("temperature") == 1.0, body
    entries = json.loads((tmp_path / "acc" / "mlperf_log_accuracy.json").read_text())
    assert {len(bytes.fromhex(e["data"])) // 4 for e in entries} == {2}  # "answer N" in two fragments: 2 tokens
