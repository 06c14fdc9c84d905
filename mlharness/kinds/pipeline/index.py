"""The vector database of e2e-rag: e5 embeddings in a FAISS HNSW index beside the passages they index, built, saved
and loaded with each step timed.

As the reference's ``retrieve/vectordb.py``: ``faiss.IndexHNSWFlat(dim, 32)`` (L2 metric over normalised
embeddings, so the order is the cosine order), ``efConstruction`` 200, ``efSearch`` 100; passages embedded as they
are (no e5 prefix) with ``normalize_embeddings=True``; a search returns the passages with their metadata
(``original_url``, ``source``) and FAISS's squared L2 distance. The reference pickles a LangChain ``FAISS`` store
into one ``<name>.db`` file; a database here is a folder: ``index.faiss`` (``faiss.write_index``),
``passages.jsonl`` (one ``{"text", "metadata"}`` per vector, in index order: LangChain's docstore and
``index_to_docstore_id`` in one file) and ``mlharness.json`` (what built it, its parameters and timings). The folder
is mlharness's own: saving refuses a folder that exists without that marker, so nothing we did not write is ever
overwritten.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import check_regular_file, iter_jsonl, read_bytes_bounded, read_json

MARKER_LIMIT = 16 << 20
"""Most bytes read of a database's marker file (its counts, parameters and timings: a few KiB)."""

HNSW_M = 32
EF_CONSTRUCTION = 200
EF_SEARCH = 100
MARKER = "mlharness.json"
MARKER_KIND = "mlharness e2e-rag vector database"


class Embedder:
    """A sentence-transformers model embedding texts as the reference's ``HuggingFaceEmbeddings`` does (normalised,
    no prefix); thread-safe. The tokenizer runs under a lock (a fast tokenizer refuses concurrent calls). With
    ``concurrent`` (a stage that sets its workers' ``threads``, each worker's torch threads its own share of the
    cores) the model's forwards of several workers run side by side, torch releasing the GIL inside, as
    ``rerank.py`` does; without it, one whole ``encode`` at a time, torch spreading that one over the cores (workers
    beside it would only oversubscribe them)."""

    def __init__(self, path: str | Path, device: str = "cpu", batch_size: int = 32, concurrent: bool = False):
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        self.path = str(path)
        hf_logging.disable_progress_bar()  # no "Loading weights" bar in a run's output
        try:
            self.model = SentenceTransformer(self.path, device=device, local_files_only=True)
        finally:
            hf_logging.enable_progress_bar()
        self.batch_size = batch_size
        self.lock = threading.Lock() if not concurrent else contextlib.nullcontext()  # one encode at a time
        self.tokenizer_lock = threading.Lock()
        preprocess = self.model.preprocess  # what encode tokenizes each batch with

        def locked_preprocess(*args: Any, **kwargs: Any) -> Any:
            with self.tokenizer_lock:
                return preprocess(*args, **kwargs)

        self.model.preprocess = locked_preprocess
        self.dim = int(self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension")
                       else self.model.get_sentence_embedding_dimension())

    def embed(self, texts: list[str]) -> Any:
        """float32 array (len(texts), dim) of unit vectors."""
        import numpy as np

        with self.lock:
            out = self.model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(out, dtype=np.float32)


def folder_fingerprint(path: str | Path, small: int = 1 << 20) -> str:
    """sha256 over a model folder's files (recursively, by relative path): each one's size and mtime, and the
    content of those up to ``small`` bytes (configs, tokenizer files). New weights written into the same folder
    change it, so what was computed from the old ones is not reused; large weight files are not read (a
    gigabyte's hash at every load), their size and mtime stand for them."""
    import hashlib

    root = Path(path)
    digest = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        st = f.stat()
        digest.update(f"{f.relative_to(root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        if st.st_size <= small:  # through the door: a file swapped for a FIFO is refused, never waited on
            digest.update(read_bytes_bounded(f, "model file", small, error=DatasetError))
    return digest.hexdigest()


def new_index(dim: int) -> Any:
    """The reference's ``_create_vector_index``."""
    import faiss

    index = faiss.IndexHNSWFlat(dim, HNSW_M)
    index.hnsw.efConstruction = EF_CONSTRUCTION
    index.hnsw.efSearch = EF_SEARCH
    return index


def index_params(index: Any) -> dict[str, Any]:
    """``db_manifest._index_params``: the class, dimension, metric and HNSW parameters the manifest compares."""
    import faiss

    base = faiss.downcast_index(index)
    params = {"class": type(base).__name__, "dim": int(base.d), "metric_type": int(base.metric_type)}
    hnsw = getattr(base, "hnsw", None)
    if hnsw is not None:
        params["efConstruction"] = int(hnsw.efConstruction)
        params["efSearch"] = int(hnsw.efSearch)
        params["M"] = int(hnsw.nb_neighbors(0)) // 2
    return params


@dataclass
class VectorDB:
    """An index and its passages. ``add`` is safe from several threads (the reference's ``db_lock``); a search
    reads concurrently (FAISS searches are read-only and release the GIL)."""

    index: Any
    texts: list[str] = field(default_factory=list)
    metadatas: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, texts: list[str], embeddings: Any, metadatas: list[dict[str, Any]]) -> None:
        if len(texts) != len(embeddings) or len(texts) != len(metadatas):
            raise ValueError(f"{len(texts)} passages, {len(embeddings)} embeddings and {len(metadatas)} metadata "
                             "rows: one of each per passage")
        with self.lock:
            self.index.add(embeddings)
            self.texts.extend(texts)
            self.metadatas.extend(metadatas)

    def search(self, vectors: Any, k: int) -> list[list[tuple[int, float]]]:
        """For each query vector, the top-``k`` (passage row, squared L2 distance), nearest first."""
        distances, rows = self.index.search(vectors, min(k, max(len(self), 1)))
        return [[(int(r), float(d)) for r, d in zip(rr, dd, strict=True) if r >= 0]
                for rr, dd in zip(rows, distances, strict=True)]

    def params(self) -> dict[str, Any]:
        return index_params(self.index)

    def save(self, folder: str | Path) -> Path:
        """Write the database into ``folder`` (timed as ``save_s``); refuses a folder that exists and is not one
        mlharness wrote."""
        import faiss

        folder = Path(folder)
        if folder.exists() and not (folder / MARKER).is_file() and any(folder.iterdir()):
            raise FileExistsError(f"{folder} exists and is not a database mlharness wrote (no {MARKER}): refusing "
                                  "to write into it; name a new folder")
        start = time.perf_counter()
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(folder / "index.faiss"))
        with open(folder / "passages.jsonl", "w", encoding="utf-8") as out:
            for text, meta in zip(self.texts, self.metadatas, strict=True):
                out.write(json.dumps({"text": text, "metadata": meta}, ensure_ascii=False) + "\n")
        self.timings["save_s"] = time.perf_counter() - start
        marker = {"kind": MARKER_KIND, "passages": len(self), "index_params": self.params(), **self.info,
                  "timings": self.timings}
        (folder / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> VectorDB:
        """Open a database ``save`` wrote (timed as ``load_s``)."""
        import faiss

        folder = Path(folder)
        try:
            marker = read_json(folder / MARKER, "marker", MARKER_LIMIT, error=DatasetError)
        except DatasetError as e:
            raise DatasetError(f"{folder} is not a vector database mlharness wrote ({e})") from None
        if not isinstance(marker, dict):
            raise DatasetError(f"{folder} is not a vector database mlharness wrote ({MARKER} holds no JSON object)")
        start = time.perf_counter()
        # faiss reads only by path: the file is checked first (a FIFO would block its read for ever)
        index = faiss.read_index(str(check_regular_file(folder / "index.faiss", "index", error=DatasetError)))
        texts, metas = [], []
        passages = folder / "passages.jsonl"
        for number, row in iter_jsonl(passages, "passages", error=DatasetError):
            if not isinstance(row, dict) or "text" not in row or "metadata" not in row:
                raise DatasetError(f"passages {passages}, line {number}: expected an object with 'text' and "
                                   "'metadata' (a database mlharness wrote)")
            texts.append(row["text"])
            metas.append(row["metadata"])
        if index.ntotal != len(texts):
            raise ValueError(f"{folder}: index.faiss holds {index.ntotal} vectors but passages.jsonl "
                             f"{len(texts)} passages")
        info = {k: v for k, v in marker.items() if k not in ("kind", "passages", "index_params", "timings")}
        db = cls(index, texts, metas, timings={"load_s": time.perf_counter() - start}, info=info)
        return db


def build(embedder: Embedder, documents: list[dict[str, Any]], passages_of: Any = None) -> VectorDB:
    """A database of ``documents`` (each ``{"name", "content", "url"}``) cut by ``passages_of(content, name)``
    (default: :func:`mlharness.kinds.pipeline.chunking.document_passages`), with the reference's metadata per passage
    (``source``, ``passage_id``, ``original_url``); ``chunk_s``, ``embed_s`` and ``index_s`` timed."""
    from mlharness.kinds.pipeline.chunking import document_passages

    passages_of = passages_of or document_passages
    db = VectorDB(new_index(embedder.dim), info={"embedder": embedder.path})
    start = time.perf_counter()
    texts, metas = [], []
    for doc in documents:
        chunks = passages_of(doc["content"], doc["name"])
        texts += chunks
        metas += [{"source": doc["name"], "passage_id": i, "original_url": doc.get("url", "")}
                  for i in range(len(chunks))]
    db.timings["chunk_s"] = time.perf_counter() - start
    start = time.perf_counter()
    vectors = embedder.embed(texts) if texts else None
    db.timings["embed_s"] = time.perf_counter() - start
    start = time.perf_counter()
    if texts:
        db.add(texts, vectors, metas)
    db.timings["index_s"] = time.perf_counter() - start
    return db
