"""The real e2e-rag manifests (e2e-rag-db.yaml with e5-base-v2, e2e-rag-qna.yaml with e5-base-v2, colbertv2.0 and
gpt-oss-120b behind an OpenAI-compatible endpoint) by their default performance command, ``--min-duration-ms``
only: their checkpoints swapped for the tiny random ones (nothing downloaded), the synthetic corpus, and qna's
chat stages pointed at a stand-in OpenAI-compatible server on 127.0.0.1. Everything else is the manifest as
shipped: its stages, workers, timeouts, hooks, multi-shot loop and the round's settings; each run is VALID with no
sample failed."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.helpers.cli import cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120),
              pytest.mark.skipif(importlib.util.find_spec("faiss") is None, reason="needs faiss-cpu (the rag extra)")]

EMBEDDER = {"graph_path": "e2e-rag-embedder-random", "generator": "mlharness.kinds.pipeline.models:ensure_random_embedder"}
RERANKER = {"graph_path": "e2e-rag-reranker-random", "generator": "mlharness.kinds.pipeline.models:ensure_random_reranker"}


def real(name: str) -> tuple[dict, dict]:
    """The shipped manifest and its stages by name."""
    import yaml

    from mlharness.paths import MANIFESTS_DIR

    doc = yaml.safe_load((MANIFESTS_DIR / name.split(".")[0] / name).read_text())
    return doc, {s["name"]: s for s in doc["inputs"][0]["parameters"]["stages"]}


def run_valid(env, tmp_path, doc: dict) -> str:
    import yaml

    manifest = tmp_path / f"{doc['name']}-tiny.yaml"
    manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "perf"
    proc = cli(env, "run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "performance",
               "--min-duration-ms", "100", "--output", str(out), "--no-progress", timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert re.search(r"^Result is : VALID", summary, re.M), summary
    assert re.search(r"pipeline +\d+ samples \(0 failed\)", proc.stdout), proc.stdout
    return proc.stdout


def test_e2e_rag_db_real_manifest_is_valid(env, tmp_path):
    doc, stages = real("e2e-rag-db.yaml")
    assert stages["index"]["model"] == {"graph_path": "e5-base-v2"}  # what is swapped, and only that
    stages["index"]["model"] = dict(EMBEDDER)
    doc["attributes"] = {"synthetic_e2e_rag": True}  # the synthetic corpus (no --dataset-path)
    out = run_valid(env, tmp_path, doc)
    assert "stage index" in out


def test_e2e_rag_qna_real_manifest_is_valid_against_a_stand_in_endpoint(env, tmp_path):
    from tests.helpers.session_server import ChatServer

    doc, stages = real("e2e-rag-qna.yaml")
    chat = [name for name, s in stages.items() if s["framework"] == "openai"]
    assert {"plan", "grade", "decide", "generate"} <= set(chat), sorted(stages)
    stages["retrieve"]["model"], stages["rerank"]["model"] = dict(EMBEDDER), dict(RERANKER)
    stages["retrieve"]["options"] = {**stages["retrieve"]["options"], "synthetic_corpus": True}
    stages["retrieve"]["options"].pop("corpus", None)
    stages["retrieve"]["options"].pop("database", None)
    doc["attributes"] = {**(doc.get("attributes") or {}), "synthetic_e2e_rag": True}
    with ChatServer() as server:
        for name in chat:  # replies without JSON: the reference's fallbacks, one round, then the answer
            stages[name]["options"] = {**stages[name]["options"], "endpoints": [server.url], "model": "chat-model"}
        out = run_valid(env, tmp_path, doc)
    assert "stage generate" in out
    answers = [r for r in server.requests
               if r["body"]["messages"][0]["content"].startswith("Answer the question based ONLY on the provided")]
    assert answers and len(server.requests) > len(answers)  # the loop's other calls went there too
