"""The ``rag-db-build`` stage: e2e-rag-db's system under test, one LoadGen sample per document, as the reference's
``reference_SUT_datasetup.DatasetupSUT`` builds the database.

A sample's item is one page (``{"name", "content", "url"}``, from the manifest's preprocess). The stage cuts it
(:func:`~mlharness.kinds.pipeline.chunking.document_passages`), embeds its passages outside the database's lock (several
workers' embeddings run side by side only where the stage sets ``threads``, each worker's share of the cores; else
one at a time, each spread over the cores: :class:`~mlharness.kinds.pipeline.index.Embedder`), then adds them to the
shared index under the database's lock, with the reference's metadata (``source``,
``passage_id``, ``original_url``). When the completed documents reach the data set's count (``options.documents``,
or the item's ``total``), that sample saves the database and answers the MD5 of what it saved (32 hexadecimal
characters); every other sample answers one byte, 1 (0 is never answered: a failure fails the sample, exit 3). This
is the response ``datasetup_accuracy_eval.py`` reads: all files successful, the returned MD5 equal to the saved
database's. The pipeline's warm-up and calibration play a few pages before LoadGen starts: :meth:`begin_test`, which
the SUT calls right before LoadGen's first query, starts a new database, so the one saved holds the test's pages and
nothing else, whichever worker finishes which page first. As the reference, the database is saved when the completed
pages reach the count, once; pages a performance run repeats after that are added but not saved again. The
reference hashes its one ``.db`` file; here the MD5 runs over the saved folder's ``index.faiss``
then ``passages.jsonl`` (:func:`database_md5`).

Where the database goes: each build is saved into a folder of its own named by its MD5,
``<cache>/<options.database>/<md5>`` (written under a temporary name, then renamed), and the last page's ``result``
names that folder (``database``) beside its ``md5``, so the run's ``pipeline_results.jsonl`` says which database its
accuracy log's MD5 refers to and the accuracy task (``e2e_rag_db``) reads that one. A later run never replaces it
(another database is another folder; the same bytes are the same folder) and concurrent runs do not write into each
other's; a folder there that mlharness did not write is never written into. Old builds are not deleted.

Options: ``database`` (the folder the builds are saved under, relative to the cache; default ``e2e-rag-db/built``),
``documents`` (the data set's page count). The stage's
``model`` is the embedder. ``describe`` reports the build's chunk, embed, index and save times and the passages per
second.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import open_regular
from mlharness.kinds.pipeline import index
from mlharness.kinds.pipeline.chunking import document_passages
from mlharness.kinds.pipeline.retrieval import asset_path
from mlharness.kinds.pipeline.stage import Item, StageContext, StageError, StageSpec, register_stage


def database_md5(folder: str | Path) -> str:
    """MD5 over the saved database's ``index.faiss`` then ``passages.jsonl``, read in 8 KiB blocks as the
    reference's ``compute_md5``."""
    md5 = hashlib.md5()  # noqa: S324 - the reference's checksum, not a security measure
    for name in ("index.faiss", "passages.jsonl"):
        with open_regular(Path(folder) / name, f"database file {name}", error=DatasetError) as f:
            for block in iter(lambda f=f: f.read(8192), b""):
                md5.update(block)
    return md5.hexdigest()


def save_build(db: index.VectorDB, parent: str | Path) -> tuple[Path, str]:
    """Save ``db`` as ``parent/<md5>`` (see the module's docstring) and return that folder and the MD5: written
    under a temporary name of this process's, hashed, then renamed; where that MD5's folder is already there (the
    same bytes, saved before or by a concurrent run) the new copy is dropped."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    tmp = db.save(parent / f".building-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    md5 = database_md5(tmp)
    target = parent / md5
    try:
        tmp.rename(target)
    except OSError:
        if not (target / index.MARKER).is_file():
            raise FileExistsError(f"{target} exists and is not a database mlharness wrote (no {index.MARKER}): "
                                  f"the build is left in {tmp}") from None
        shutil.rmtree(tmp)  # our own temporary copy of bytes already saved there
    return target, md5


class DbBuildStage:
    def __init__(self, spec: StageSpec, ctx: StageContext):
        self.spec, self.ctx, self.name = spec, ctx, spec.name
        self.parent = Path(ctx.cache_dir) / spec.options.get("database", "e2e-rag-db/built")
        self.folder: Path | None = None  # the saved build's folder, parent/<md5>
        self.documents = spec.options.get("documents")
        self.embedder: index.Embedder | None = None
        self.db: index.VectorDB | None = None
        self.lock = threading.Lock()
        self.completed = 0
        self.md5: str | None = None
        self.times = {"chunk_s": 0.0, "embed_s": 0.0, "index_s": 0.0, "save_s": 0.0}
        self.passages = 0
        self.first: float | None = None
        self.last: float | None = None

    def load(self) -> None:
        self.embedder = index.Embedder(asset_path(self.spec, self.ctx), device=self.ctx.device,
                                       concurrent=bool(self.spec.threads))
        self.db = index.VectorDB(index.new_index(self.embedder.dim), info={"embedder": self.embedder.path})
        # torch's first call of each batch shape is slow (its kernels are set up then): shapes a page's passages
        # take are played once here, so the calibration's few samples see the steady rate, not this set-up
        for n in range(1, 5):
            for size in (48, 200, 768):
                self.embedder.embed(["warm up text " * (size // 13 + 1)][:1] * n)

    def begin_test(self) -> None:
        """A new, empty database for LoadGen's test (the warm-up's and calibration's pages are dropped), its counts
        and timings from zero."""
        with self.lock:
            self.db = index.VectorDB(index.new_index(self.embedder.dim), info={"embedder": self.embedder.path})
            self.completed, self.passages, self.md5, self.folder = 0, 0, None, None
            self.times = dict.fromkeys(self.times, 0.0)
            self.first = self.last = None

    def run(self, item: Item) -> Item:
        if not isinstance(item.get("content"), str) or not item.get("name"):
            raise StageError(self.name, f"the item needs a page's 'name' and 'content' (keys: {sorted(item)})")
        start = time.perf_counter()
        with self.lock:
            self.first = self.first or start
        texts = document_passages(item["content"], item["name"])
        chunked = time.perf_counter()
        vectors = self.embedder.embed(texts)
        embedded = time.perf_counter()
        metas = [{"source": item["name"], "passage_id": i, "original_url": item.get("url", "")}
                 for i in range(len(texts))]
        total = int(self.documents or item.get("total") or 0)
        with self.lock:
            self.db.add(texts, vectors, metas)
            added = time.perf_counter()
            self.times["chunk_s"] += chunked - start
            self.times["embed_s"] += embedded - chunked
            self.times["index_s"] += added - embedded
            self.passages += len(texts)
            self.completed += 1
            last = self.completed == total
            if last:
                self.folder, self.md5 = save_build(self.db, self.parent)
                self.times["save_s"] = time.perf_counter() - added
            self.last = time.perf_counter()
            md5, folder = (self.md5, self.folder) if last else (None, None)
        item["passages_indexed"] = len(texts)
        item["response"] = list(md5.encode()) if md5 else [1]
        item["result"] = {"name": item["name"], "passages": len(texts), "md5": md5}
        if folder:
            item["result"]["database"] = str(folder)
        return item

    def close(self) -> None:
        self.embedder = None

    def describe(self) -> dict[str, Any]:
        wall = (self.last - self.first) if self.first and self.last else 0.0
        return {"database": str(self.folder or self.parent), "documents_indexed": self.completed,
                "passages": self.passages, "md5": self.md5, "timings": dict(self.times),
                "passages_per_s": self.passages / wall if wall > 0 else None,
                "index_params": self.db.params() if self.db else None}


@register_stage("rag-db-build")
def db_build_stage(spec: StageSpec, ctx: StageContext) -> DbBuildStage:
    return DbBuildStage(spec, ctx)


def db_pages(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's pages (e2e-rag-db's samples, the reference's ``DatasetupQSLInMemory``: the ``*.html`` files of the
    corpus in name order, each with its URL and the data set's count as ``total``): ``--dataset-path`` names the
    ``doc_html`` folder or the folder holding it; without it a manifest with the attribute ``synthetic_e2e_rag``
    uses the synthetic set in the cache (``dataset synth e2e-rag``), written there the first time."""
    from mlharness.kinds.pipeline.retrieval import corpus_documents

    root = ctx.get("dataset_path")
    if not root and (ctx.get("attributes") or {}).get("synthetic_e2e_rag"):
        from mlharness.tasks.e2e_rag.synth import DOCS, write_synthetic_frames
        from mlharness.tasks.generative import synthetic_cache

        root = synthetic_cache("e2e-rag")
        if not (Path(root) / DOCS / "url_mapping.json").is_file():
            write_synthetic_frames(Path(root))
    if not root:
        raise FileNotFoundError("e2e-rag-db needs the corpus: --dataset-path names a doc_html folder (or the folder "
                                "holding it), as 'mlharness dataset synth e2e-rag' or the official download leave it")
    folder = Path(root) / "doc_html" if (Path(root) / "doc_html").is_dir() else Path(root)
    pages = corpus_documents(folder)
    return [{**page, "total": len(pages)} for page in pages]
