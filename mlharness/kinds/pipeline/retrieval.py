"""The ``retrieval`` stage: a query's top-k passages from the e5/FAISS database, as the reference's
``VectorDB.lookup_with_scores`` returns them (the query embedded as it is, no prefix; score = minus FAISS's squared L2
distance, higher is nearer).

Stage options: ``database`` (a folder :class:`~mlharness.kinds.pipeline.index.VectorDB` saved) or ``corpus`` (a
``doc_html`` folder of ``*.html`` pages with ``url_mapping.json``, as ``dataset synth e2e-rag`` and the official
download leave it: built into the cache at load, timed, and reused while the pages and the embedder's files are
the same) or
``synthetic_corpus: true`` (the synthetic set's pages in the cache), ``top_k`` (default 10).
The stage's ``model`` is the embedder (``graph_path`` beside the manifest, or made by its ``generator``); its
workers embed queries side by side only when the stage sets ``threads`` (else one at a time:
:class:`~mlharness.kinds.pipeline.index.Embedder`), FAISS searches always concurrently. The item's
``query`` is read; ``passages`` is added: ``[{"text", "url", "source", "score"}, ...]``, nearest first. An item
with ``queries`` (a round of the multi-shot loop, :mod:`mlharness.tasks.e2e_rag.multishot`) gets ``query_passages``
instead, each sub-query's ``query_top_k`` (else ``top_k``) passages, as the reference looks each one up.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import time
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import read_bytes_bounded, read_json
from mlharness.kinds.pipeline import index
from mlharness.kinds.pipeline.stage import Item, StageContext, StageError, StageSpec, register_stage


def asset_path(spec: StageSpec, ctx: StageContext, model: dict[str, Any] | None = None) -> Path:
    """A stage's model folder: ``graph_path`` beside the manifest (or absolute), else written by ``generator``
    (``module:function`` called with a folder in the cache) when it is not there."""
    model = model if model is not None else (spec.model or {})
    graph = model.get("graph_path")
    if not graph:
        raise StageError(spec.name, "the stage needs a model: set its model.graph_path (and model.generator to make it)")
    path = Path(graph) if Path(graph).is_absolute() else Path(ctx.manifest_dir) / graph
    if not path.exists() and model.get("generator"):
        module, _, name = str(model["generator"]).partition(":")
        target = Path(ctx.cache_dir) / "generated" / Path(graph).name
        path = Path(getattr(importlib.import_module(module), name)(target))
    if not path.exists():
        raise StageError(spec.name, f"model folder {path} does not exist")
    return path


PAGE_LIMIT = 256 << 20
"""Most bytes read of one corpus page (the largest Wikipedia pages are a few MiB)."""


def corpus_documents(folder: str | Path) -> list[dict[str, Any]]:
    """The pages of a ``doc_html`` folder in name order, each with its URL from ``url_mapping.json`` (file name
    without ``.html`` -> URL), as ``reference_SUT_datasetup.py``'s QSL and ``load_url_mapping`` read them."""
    folder = Path(folder)
    mapping_file = folder / "url_mapping.json"
    # a FIFO or a device in its place is an error naming it, not a corpus without URLs
    mapping = read_json(mapping_file, "URL mapping", error=DatasetError) if mapping_file.exists() else {}
    if not isinstance(mapping, dict):
        raise DatasetError(f"URL mapping {mapping_file} is not a JSON object (page name -> URL)")
    pages = sorted(folder.glob("*.html"))
    if not pages:
        raise FileNotFoundError(f"{folder}: no *.html pages (expected a doc_html folder from 'dataset synth e2e-rag'"
                                " or the official download)")
    return [{"name": p.name, "content": read_bytes_bounded(p, "page", PAGE_LIMIT, error=DatasetError).decode(
        "utf-8", errors="replace"), "url": mapping.get(p.name[: -len(".html")], "")} for p in pages]


def synthetic_corpus() -> Path:
    """The synthetic FRAMES set's ``doc_html`` in the cache (``dataset synth e2e-rag``, written the first time):
    the corpus of ``options.synthetic_corpus: true``, the one the e2e-rag test manifests' questions are about."""
    from mlharness.tasks.e2e_rag.synth import DOCS, write_synthetic_frames
    from mlharness.tasks.generative import synthetic_cache

    root = synthetic_cache("e2e-rag")
    if not (root / DOCS / "url_mapping.json").is_file():
        write_synthetic_frames(root)
    return root / DOCS


def open_or_build(spec: StageSpec, ctx: StageContext, embedder: index.Embedder) -> index.VectorDB:
    """The stage's database: ``options.database`` loaded, or ``options.corpus`` built into the cache and saved,
    then reused; keyed by the corpus's pages and the embedder folder's files
    (:func:`~mlharness.kinds.pipeline.index.folder_fingerprint`), so other weights in the same folder build anew."""
    opts = spec.options
    base = Path(ctx.manifest_dir)
    if opts.get("database"):
        return index.VectorDB.load(base / opts["database"])
    corpus = opts.get("corpus") or ctx.attributes.get("corpus")
    if not corpus and opts.get("synthetic_corpus"):
        corpus = synthetic_corpus()
    if not corpus:
        raise StageError(spec.name, "set options.database (a saved database), options.corpus (a doc_html folder) "
                         "or options.synthetic_corpus: true")
    docs = corpus_documents(base / corpus)
    key = hashlib.sha256(json.dumps([[d["name"], d["url"], d["content"]] for d in docs]).encode()
                         + index.folder_fingerprint(embedder.path).encode()).hexdigest()[:16]
    folder = Path(ctx.cache_dir) / "e2e-rag-db" / key
    if (folder / index.MARKER).is_file():
        return index.VectorDB.load(folder)
    start = time.perf_counter()
    db = index.build(embedder, docs)
    db.timings["build_s"] = time.perf_counter() - start
    db.save(folder)
    return db


class RetrievalStage:
    def __init__(self, spec: StageSpec, ctx: StageContext):
        self.spec, self.ctx, self.name = spec, ctx, spec.name
        self.top_k = int(spec.options.get("top_k", 10))
        self.embedder: index.Embedder | None = None
        self.db: index.VectorDB | None = None

    def load(self) -> None:
        self.embedder = index.Embedder(asset_path(self.spec, self.ctx), device=self.ctx.device,
                                       concurrent=bool(self.spec.threads))
        self.db = open_or_build(self.spec, self.ctx, self.embedder)
        self.db.search(self.embedder.embed(["warm up"]), self.top_k)  # torch's and FAISS's first call, untimed
        if self.db.params()["dim"] != self.embedder.dim:
            raise StageError(self.name, f"the database holds {self.db.params()['dim']}-dimensional vectors but the "
                                        f"embedder {self.embedder.path} makes {self.embedder.dim}")

    def run(self, item: Item) -> Item:
        queries = item.get("queries")
        if queries is not None:  # a multi-shot round's sub-queries: each one's own top k
            if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
                raise StageError(self.name, f"the item's 'queries' must be a non-empty list of texts; got {queries!r}")
            k = int(item.get("query_top_k") or self.top_k)
            item["query_passages"] = [self._passages(hits) for hits in self.db.search(self.embedder.embed(queries), k)]
            return item
        query = item.get("query")
        if not isinstance(query, str):
            raise StageError(self.name, f"the item has no 'query' text (keys: {sorted(item)})")
        item["passages"] = self._passages(self.db.search(self.embedder.embed([query]), self.top_k)[0])
        return item

    def _passages(self, hits: list[tuple[int, float]]) -> list[dict[str, Any]]:
        return [{"text": self.db.texts[row], "url": self.db.metadatas[row].get("original_url", ""),
                 "source": self.db.metadatas[row].get("source", ""), "score": -dist} for row, dist in hits]

    def close(self) -> None:
        self.embedder = self.db = None

    def describe(self) -> dict[str, Any]:
        import faiss
        import sentence_transformers

        return {"faiss": faiss.__version__, "sentence_transformers": sentence_transformers.__version__,
                "embedder": self.embedder.path if self.embedder else None, "top_k": self.top_k,
                "passages": len(self.db) if self.db else None,
                "index_params": self.db.params() if self.db else None,
                "db_timings": self.db.timings if self.db else None}


@register_stage("retrieval")
def retrieval_stage(spec: StageSpec, ctx: StageContext) -> RetrievalStage:
    return RetrievalStage(spec, ctx)
