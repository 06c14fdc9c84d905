"""e2e-rag's retrieval side: passages cut exactly as the reference's code cuts them, the FAISS database built, saved
and loaded (timed), the retrieval stage finding a planted passage, MaxSim as a hand computation, reranking order."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("faiss")
pytest.importorskip("sentence_transformers")

from helpers.rag_corpus import TOWNS, write_corpus  # noqa: E402

from mlharness.kinds.pipeline import chunking, index, models  # noqa: E402
from mlharness.kinds.pipeline.rerank import maxsim  # noqa: E402
from mlharness.kinds.pipeline.stage import STAGES, StageContext, StageSpec  # noqa: E402

OFFICIAL = Path(os.environ.get("MLHARNESS_INFERENCE_GIT", "/work/.mirror/mlcommons+inference/repo"))
SAMPLE = ("  The  Kalomer bridge\twas built in 1804.It spans the river;its arches-\n  are  stone.\n\n\n"
          + "Records, kept in the archive,say so! " * 60 + "\u00a0End of text.\r\nLast line")


def official(path: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(OFFICIAL), "show", f"HEAD:e2e-rag/{path}"], capture_output=True,
                              text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip(f"the official e2e-rag/{path} is not readable at {OFFICIAL} (set MLHARNESS_INFERENCE_GIT)")


def test_chunking_equals_the_reference_code():
    splitter: dict = {}
    exec(compile(official("text_splitter.py"), "text_splitter.py", "exec"), splitter)  # noqa: S102
    # HTMLExtractor's cleaning methods, taken out of read_docs.py (its module imports BeautifulSoup)
    tree = ast.parse(official("read_docs.py"))
    methods = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
               and n.name in ("_clean_text", "_optimize_word_boundaries", "_optimize_sentence_boundaries")}
    cls = ast.ClassDef(name="Extractor", bases=[], keywords=[], decorator_list=[], type_params=[],
                       body=[methods[k] for k in sorted(methods)])
    ns: dict = {"re": __import__("re")}
    exec(compile(ast.fix_missing_locations(ast.Module(body=[cls], type_ignores=[])), "read_docs", "exec"), ns)  # noqa: S102
    for boundary in ("word", "sentence", "none"):
        ext = ns["Extractor"]()
        ext.text_boundary = boundary
        assert chunking.extractor_clean(SAMPLE, boundary) == ext._clean_text(SAMPLE)
    text = chunking.extractor_clean(SAMPLE)
    for size, overlap in ((768, 32), (100, 10), (5000, 32)):
        ours = chunking.split_into_fixed_passages(text, size, overlap)
        assert ours == splitter["split_into_fixed_passages"](text, size, overlap)
    assert len(chunking.split_into_fixed_passages(text)) > 2  # the sample spans several 768-character windows


@pytest.fixture(scope="module")
def rag(tmp_path_factory):
    root = tmp_path_factory.mktemp("rag")
    docs, tsv = write_corpus(root / "data")
    emb = models.ensure_random_embedder(root / "cache" / "emb")
    rr = models.ensure_random_reranker(root / "cache" / "rr")
    return {"root": root, "docs": docs, "tsv": tsv, "emb": emb, "rr": rr}


def ctx(rag) -> StageContext:
    return StageContext(manifest_dir=rag["root"] / "data", cache_dir=rag["root"] / "cache")


def test_retrieval_stage_finds_the_planted_passage_and_reuses_its_build(rag):
    import mlharness.kinds.pipeline.retrieval  # noqa: F401 - registers the stage

    spec = StageSpec(name="retrieve", framework="retrieval", options={"corpus": "doc_html", "top_k": 5},
                     model={"graph_path": str(rag["emb"])})
    stage = STAGES["retrieval"](spec, ctx(rag))
    stage.load()
    assert set(stage.db.timings) >= {"chunk_s", "embed_s", "index_s", "build_s", "save_s"}
    assert stage.db.params() == {"class": "IndexHNSWFlat", "dim": 32, "metric_type": 1, "efConstruction": 200,
                                 "efSearch": 100, "M": 32}
    planted = next(i for i, m in enumerate(stage.db.metadatas) if m["original_url"].endswith(TOWNS[3])
                   and m["passage_id"] == 1)
    out = stage.run({"query": stage.db.texts[planted]})
    assert out["passages"][0]["text"] == stage.db.texts[planted]
    assert out["passages"][0]["url"] == f"https://en.wikipedia.org/wiki/{TOWNS[3]}"
    assert out["passages"][0]["score"] == pytest.approx(0.0, abs=1e-5) and len(out["passages"]) == 5
    assert [p["score"] for p in out["passages"]] == sorted((p["score"] for p in out["passages"]), reverse=True)
    again = STAGES["retrieval"](spec, ctx(rag))
    again.load()  # the cache's database, loaded, not rebuilt
    assert "load_s" in again.db.timings and "build_s" not in again.db.timings
    assert again.run({"query": stage.db.texts[planted]})["passages"] == out["passages"]


def test_index_save_load_round_trip_and_foreign_folder_refused(rag, tmp_path):
    from mlharness.kinds.pipeline.retrieval import corpus_documents

    emb = index.Embedder(rag["emb"])
    db = index.build(emb, corpus_documents(rag["docs"]))
    assert len(db) > len(TOWNS)  # several passages a page
    q = emb.embed(["Belriden river bridge", "year 1805"])
    db.save(tmp_path / "db")
    back = index.VectorDB.load(tmp_path / "db")
    assert back.texts == db.texts and back.metadatas == db.metadatas and back.params() == db.params()
    assert back.search(q, 4) == db.search(q, 4)
    db.save(tmp_path / "db")  # our own folder: rewritten
    foreign = tmp_path / "theirs"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a database mlharness wrote"):
        db.save(foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_maxsim_equals_a_hand_computation():
    import torch

    q = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    d = torch.tensor([[[1.0, 1.0], [3.0, 0.0], [9.0, 9.0]], [[0.0, 1.0], [-1.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])  # the first passage's third token is padding
    # passage 0: token 1 -> max(1, 3) = 3; token 2 -> max(2, 0) = 2; passage 1: max(0, -1, 0) = 0, max(2, 0, 0) = 2
    assert maxsim(q, d, mask).tolist() == [5.0, 2.0]


def test_rerank_stage_orders_by_maxsim(rag):
    import mlharness.kinds.pipeline.rerank  # noqa: F401 - registers the stage

    spec = StageSpec(name="rerank", framework="rerank", options={"top_k": 3}, model={"graph_path": str(rag["rr"])})
    stage = STAGES["rerank"](spec, ctx(rag))
    stage.load()
    passages = [{"text": f"the {t} river bridge", "url": t} for t in TOWNS]
    out = stage.run({"query": "Ulmarfen bridge", "passages": list(passages)})["passages"]
    scores = stage.scores("Ulmarfen bridge", [p["text"] for p in passages])
    best = sorted(range(len(passages)), key=lambda i: scores[i], reverse=True)[:3]
    assert [p["url"] for p in out] == [TOWNS[i] for i in best]
    assert [p["rerank_score"] for p in out] == [scores[i] for i in best]
    assert len(set(scores)) > 1  # the random model tells the passages apart


def test_retrieval_rebuilds_when_the_embedders_weights_change_in_the_same_folder(rag, tmp_path):
    import shutil

    import torch
    from transformers import BertModel

    import mlharness.kinds.pipeline.retrieval  # noqa: F401 - registers the stage

    emb = tmp_path / "emb"
    shutil.copytree(rag["emb"], emb)
    spec = StageSpec(name="retrieve", framework="retrieval", options={"corpus": str(rag["docs"]), "top_k": 3},
                     model={"graph_path": str(emb)})
    first = STAGES["retrieval"](spec, StageContext(manifest_dir=tmp_path, cache_dir=tmp_path / "cache"))
    first.load()
    assert "build_s" in first.db.timings
    query = {"query": "Belriden river bridge"}
    before = first.run(dict(query))["passages"]
    model = BertModel.from_pretrained(str(emb))  # other weights, written into the same folder
    torch.manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.05)
    model.save_pretrained(str(emb), safe_serialization=True)
    again = STAGES["retrieval"](spec, StageContext(manifest_dir=tmp_path, cache_dir=tmp_path / "cache"))
    again.load()
    assert "build_s" in again.db.timings and "load_s" not in again.db.timings  # rebuilt, not the old vectors
    assert [p["score"] for p in again.run(dict(query))["passages"]] != [p["score"] for p in before]
    assert len(list((tmp_path / "cache" / "e2e-rag-db").iterdir())) == 2


def test_embedder_forwards_overlap_only_when_concurrent(rag):
    """Observed on the model's own forward hooks: two threads embedding at once are in the forward together with
    concurrent (a stage with threads), one at a time without; the vectors are the serial ones either way."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    texts = [[f"the {t} river bridge number {i}" for i in range(6)] for t in TOWNS[:2]]
    for concurrent, peak_wanted in ((False, 1), (True, 2)):
        emb = index.Embedder(rag["emb"], concurrent=concurrent)
        serial = [emb.embed(t) for t in texts]
        state = {"in": 0, "peak": 0}
        guard = threading.Lock()

        def enter(module, args, state=state, guard=guard):
            with guard:
                state["in"] += 1
                state["peak"] = max(state["peak"], state["in"])
            time.sleep(0.2)  # long enough for the other thread to reach the forward if nothing holds it back

        def leave(module, args, out, state=state, guard=guard):
            with guard:
                state["in"] -= 1

        emb.model.register_forward_pre_hook(enter)
        emb.model.register_forward_hook(leave)
        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(emb.embed, texts))
        assert state["peak"] == peak_wanted, (concurrent, state)
        assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(got, serial, strict=True))


def test_one_retrieved_url_list_for_the_results_the_hooks_and_rag_qa():
    """multi_shot_retrieval.py adds a passage's page only when its original_url is set and not seen yet, then
    keeps the first top_k_reranking: e2e-rag-qna's result entries, its hooks and rag_qa's recall read that list."""
    from mlharness.tasks.e2e_rag.hooks import result_entry, retrieved_urls
    from mlharness.tasks.generic.rag import score_one

    passages = [{"url": u, "text": str(i)} for i, u in enumerate(["a", "b", "a", "", "c", "b", None, "d"])]
    assert retrieved_urls({"passages": passages}) == ["a", "b", "c", "d"]
    assert retrieved_urls({"passages": passages}, limit=2) == ["a", "b"]
    assert retrieved_urls({"retrieved_urls": ["k", "k", "m"], "passages": passages}) == ["k", "m"]  # a stage's own
    item = {"query": "q", "answer": "x", "passages": passages, "expected_urls": ["c"]}
    assert result_entry(item)["retrieved_urls"] == ["a", "b", "c", "d"]
    # rag_qa's recall@3 over the same list: c is third once duplicates no longer take places
    scored = score_one({"answer": "x", "ground_truth": "x", "passages": passages, "expected_urls": ["c"]}, 3, "t")
    assert scored["recall"] == 1.0
