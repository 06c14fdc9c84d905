"""e2e-rag-db's manifest: written from a database as db_manifest.py writes it, verified against the same database
(passes) and against perturbed ones (a page missing, other index parameters: each fails, in the reference's words)."""

from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("faiss")
pytest.importorskip("sentence_transformers")

from helpers.rag_corpus import write_corpus  # noqa: E402

from mlharness.pipeline import dbmanifest, index, models  # noqa: E402
from mlharness.pipeline.retrieval import corpus_documents  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("ragdb")
    docs, tsv = write_corpus(root / "data")
    emb = index.Embedder(models.ensure_random_embedder(root / "emb"))
    documents = corpus_documents(docs)
    db = index.build(emb, documents)
    manifest = root / "manifest.json.gz"
    written = dbmanifest.write(db, emb, tsv, manifest, "tiny-e5")
    return {"root": root, "emb": emb, "docs": documents, "db": db, "manifest": manifest, "written": written}


def test_manifest_records_what_the_reference_records(built):
    with gzip.open(built["manifest"], "rt") as f:
        text = f.read()
    m = json.loads(text)
    assert text == json.dumps(m, indent=2)  # json.dump(manifest, f, indent=2), the reference's layout
    assert list(m) == ["version", "retriever_model", "embedding_model", "total_passages", "embedding_dim",
                       "index_params", "corpus_set_sha256", "probe_top_k", "reference_queries", "reference_top_k"]
    assert m["version"] == 2 and m["total_passages"] == len(built["db"]) and m["probe_top_k"] == 10
    assert [q["index"] for q in m["reference_queries"]] == list(range(6))  # fewer rows than 50: all, in order
    assert all(len(r["top_k_urls"]) == 10 and r["top_k_urls"][0].startswith("https://en.wikipedia.org/wiki/")
               for r in m["reference_top_k"])


def test_oracle_database_passes_and_a_rebuilt_one_too(built, tmp_path):
    assert dbmanifest.verify(built["db"], built["emb"], built["manifest"])["passed"]
    built["db"].save(tmp_path / "db")
    again = index.VectorDB.load(tmp_path / "db")
    result = dbmanifest.verify(again, built["emb"], built["manifest"])
    assert result["passed"], result["failures"]
    assert result["metrics"]["retrieval_accuracy"] == 1.0
    assert result["metrics"]["corpus_set_sha256"] == built["written"]["corpus_set_sha256"]


def test_perturbed_databases_fail(built):
    missing = index.build(built["emb"], built["docs"][1:])  # a page left out
    result = dbmanifest.verify(missing, built["emb"], built["manifest"])
    assert not result["passed"]
    assert any(f.startswith("total_passages mismatch") for f in result["failures"])
    assert any(f.startswith("retrieval overlap below threshold") for f in result["failures"])
    other = index.build(built["emb"], built["docs"])
    other.index.hnsw.efSearch = 16  # another index configuration
    result = dbmanifest.verify(other, built["emb"], built["manifest"])
    assert not result["passed"] and result["failures"][0].startswith("index_params differ")
