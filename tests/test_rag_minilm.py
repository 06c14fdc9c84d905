"""A RAG pipeline that is not MLPerf's, by manifest alone (rag-minilm): a MiniLM-shaped embedder, no reranker, an
OpenAI-compatible chat endpoint as generator (tests/helpers/session_server.py: it answers every one-user-message
turn 'answer 1'), scored by the generic rag_qa metric. The planted questions' ground truths make the figures known
by hand; recall@k is checked against the run's own retrieved URLs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.session_server import ChatServer

from mlharness.errors import AccuracyError
from mlharness.paths import MANIFESTS_DIR
from mlharness.tasks.generic.rag import recall_at_k, score_records

pytest.importorskip("mlperf_loadgen")
pytest.importorskip("faiss")
pytest.importorskip("sentence_transformers")

SRC = MANIFESTS_DIR / "rag-minilm"

# The server answers 'answer 1' to each question. Ground truths (corpus/questions.tsv), by hand, SQuAD-normalised:
#   'answer 1'      EM 1  F1 1
#   'The answer 1!' EM 1  F1 1            (article and punctuation dropped)
#   '1'             EM 0  F1 2/3          (precision 1/2, recall 1)
#   'answer 2'      EM 0  F1 1/2
#   '1843'          EM 0  F1 0
#   'answer one 1'  EM 0  F1 4/5          (precision 1, recall 2/3)
EM = 100 * 2 / 6
F1 = 100 * (1 + 1 + 2 / 3 + 1 / 2 + 0 + 4 / 5) / 6
# top_k 6 over six one-passage pages: every page is retrieved; the last question also expects a page not in the
# corpus, so its recall is 1/2
RECALL = 100 * (5 + 0.5) / 6


def run(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    manifest = tmp / "m" / "rag-minilm.yaml"
    if not manifest.exists():
        shutil.copytree(SRC, tmp / "m")
        doc = yaml.safe_load(manifest.read_text())
        doc["inputs"][0]["parameters"]["stages"][1]["options"]["endpoints"] = [url]
        manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp / f"out-{args[1]}"
    env = {**os.environ, "MLHARNESS_CACHE": str(tmp / "cache")}
    return subprocess.run([sys.executable, "-m", "mlharness", "run", "--manifest", str(manifest), "--scenario",
                           "Offline", "--output", str(out), "--no-progress", *args],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp)


def test_rag_minilm_scores_as_computed_by_hand_and_is_valid_offline(tmp_path):
    with ChatServer() as server:
        acc = run(tmp_path, server.url, "--mode", "accuracy")
        perf = run(tmp_path, server.url, "--mode", "performance", "--min-duration-ms", "500")
        asked = len(server.requests)
    assert acc.returncode == 0, acc.stdout + acc.stderr
    assert f"exact_match {EM:.3f}, f1 {F1:.3f}, recall@all {RECALL:.3f} over 6 samples (0 failed)" in acc.stdout
    records = [json.loads(x) for x in (tmp_path / "out-accuracy" / "pipeline_results.jsonl").read_text().split("\n")
               if x]
    assert sorted(r["qsl_idx"] for r in records) == list(range(6))
    assert all([v["stage"] for v in r["stages"]] == ["retrieve", "generate"] for r in records)  # no reranker
    assert all(r["result"]["answer"] == "answer 1" and len(r["result"]["retrieved_urls"]) == 6 for r in records)
    assert perf.returncode == 0, perf.stdout + perf.stderr
    assert "VALID" in perf.stdout and "INVALID" not in perf.stdout
    assert asked > 6
    # the embedder is not e5's stand-in: 24 wide, CLS pooling
    emb = tmp_path / "cache" / "generated" / "rag-minilm-embedder-random"
    assert json.loads((emb / "1_Pooling" / "config.json").read_text())["pooling_mode_cls_token"] is True
    assert json.loads((emb / "config.json").read_text())["hidden_size"] == 24


def _planted(tmp: Path, results: list) -> Path:
    (tmp / "mlperf_log_accuracy.json").write_text(json.dumps(
        [{"seq_id": i, "qsl_idx": i, "data": "00"} for i in range(len(results))]))
    (tmp / "pipeline_results.jsonl").write_text("".join(
        json.dumps({"qsl_idx": i, "query_id": i, "result": r}) + "\n" for i, r in enumerate(results)))
    return tmp / "mlperf_log_accuracy.json"


def test_rag_qa_recall_at_k_ground_truth_lists_and_failed_samples(tmp_path):
    results = [{"answer": "Paris", "ground_truths": ["paris", "Paris, France"], "expected_urls": ["u1", "u2"],
                "passages": [{"url": "u3"}, {"url": "u1"}, {"url": "u2"}]},
               {"answer": "in 1843", "ground_truth": "1843", "expected_urls": ["u4"], "retrieved_urls": ["u4", "u5"]},
               None]  # a failed sample: 0 on every figure
    log = _planted(tmp_path, results)
    m = score_records(log, k=2)
    assert m["exact_match"] == pytest.approx(100 / 3)  # only 'Paris'
    assert m["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)  # 'in 1843' vs '1843': precision 1/2, recall 1
    assert m["recall_at_k"] == pytest.approx(100 * (0.5 + 1 + 0) / 3)  # top 2 of the first: u3, u1
    assert score_records(log)["recall_at_k"] == pytest.approx(100 * 2 / 3)
    assert m["failed"] == 1 and recall_at_k(["a"], ["a", "b"], None) == 0.5
    _planted(tmp_path, [{"answer": "x", "expected_urls": []}])
    with pytest.raises(AccuracyError, match="sample 0: the result needs 'ground_truths'"):
        score_records(log)
