"""e2e-rag-db's database manifest: written from a database and verified against one as the reference's
``db_manifest.py write`` / ``verify`` (``scripts/write_db_manifest.sh``, ``scripts/verify_db_manifest.sh``) do.

The check is behavioural equivalence, not byte identity: the passage count and embedding dimension, the FAISS index
parameters (class, dim, metric, efConstruction, efSearch, M), and the mean overlap of the top-10 document URLs of
50 probe questions (``random.Random(0xC0FFEE).sample`` over the FRAMES TSV's rows) with the manifest's, at least
0.95. The corpus-set hash (SHA-256 over the sorted per-passage SHA-256s) is recorded and reported, never gated. The
manifest's JSON is ``json.dump(manifest, indent=2)`` with the reference's keys in its order, gzip'd when the name
ends in ``.gz``, so a manifest written here reads there and back.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import random
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import (
    DATA_FILE_LIMIT,
    parse_json,
    read_bytes_bounded,
    read_gzip_bounded,
    read_text_bounded,
)
from mlharness.kinds.pipeline.index import Embedder, VectorDB

MANIFEST_VERSION = 2
ACCEPTED_VERSIONS = (2, "v2-behavioral")
SAMPLE_SEED = 0xC0FFEE
NUM_PROBE_QUERIES = 50
PROBE_TOP_K = 10
RETRIEVAL_THRESHOLD = 0.95


MANIFEST_LIMIT = 256 << 20
"""Most bytes of a database manifest, gzip'd or not (50 probe queries and their top-10 URLs: a few tens of KiB)."""


def _create(path: str | Path) -> Any:
    return gzip.open(path, "wt") if str(path).endswith(".gz") else open(path, "w")


def read_manifest(path: str | Path) -> Any:
    """The JSON of a database manifest (gzip'd when its name ends in ``.gz``), read through the one door and
    bounded, also once decompressed."""
    path = Path(path)
    if str(path).endswith(".gz"):
        data = read_gzip_bounded(path, "database manifest", MANIFEST_LIMIT, error=DatasetError)
    else:
        data = read_bytes_bounded(path, "database manifest", MANIFEST_LIMIT, error=DatasetError)
    return parse_json(data, f"database manifest {path}", error=DatasetError)


def corpus_set_sha256(db: VectorDB) -> str:
    h = hashlib.sha256()
    for ph in sorted(hashlib.sha256(t.encode("utf-8", errors="replace")).hexdigest() for t in db.texts):
        h.update(ph.encode("ascii"))
        h.update(b"\x00")
    return h.hexdigest()


def probe_queries(dataset_tsv: str | Path, n: int = NUM_PROBE_QUERIES) -> list[dict[str, Any]]:
    """``_load_probe_queries``: ``n`` rows of the FRAMES TSV chosen with the reference's seed, in row order."""
    import io

    text = read_text_bounded(Path(dataset_tsv), "dataset TSV", DATA_FILE_LIMIT, error=DatasetError)
    rows = list(csv.DictReader(io.StringIO(text, newline=""), delimiter="\t"))
    rng = random.Random(SAMPLE_SEED)
    indices = sorted(rng.sample(range(len(rows)), min(n, len(rows))))
    return [{"index": i, "prompt": str(rows[i]["Prompt"])} for i in indices]


def top_k_urls(db: VectorDB, embedder: Embedder, queries: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    hits = db.search(embedder.embed([q["prompt"] for q in queries]), k) if queries else []
    out = []
    for q, found in zip(queries, hits, strict=True):
        metas = [db.metadatas[row] for row, _ in found]
        out.append({"index": q["index"], "top_k_urls": [m.get("original_url") or m.get("source")
                                                         or m.get("base_filename") or "" for m in metas]})
    return out


def norm_url(u: str) -> str:
    """``_norm_url``: the article a URL or a page file name names, anchors dropped."""
    u = u.lower()
    for pre in ("https://", "http://"):
        if u.startswith(pre):
            u = u[len(pre):]
    if u.endswith(".html"):
        u = u[:-5]
    u = u.replace("en.wikipedia.org/wiki/", "").replace("en.wikipedia.org_wiki_", "")
    return u.split("#")[0].replace("/", "_").strip("_")


def write(db: VectorDB, embedder: Embedder, dataset_tsv: str | Path, output: str | Path, model_name: str,
          num_queries: int = NUM_PROBE_QUERIES) -> dict[str, Any]:
    queries = probe_queries(dataset_tsv, num_queries)
    manifest = {"version": MANIFEST_VERSION, "retriever_model": model_name, "embedding_model": model_name,
                "total_passages": len(db), "embedding_dim": embedder.dim, "index_params": db.params(),
                "corpus_set_sha256": corpus_set_sha256(db), "probe_top_k": PROBE_TOP_K,
                "reference_queries": queries, "reference_top_k": top_k_urls(db, embedder, queries, PROBE_TOP_K)}
    with _create(output) as f:
        json.dump(manifest, f, indent=2)
    return manifest


def verify(db: VectorDB, embedder: Embedder, manifest_path: str | Path,
           threshold: float = RETRIEVAL_THRESHOLD) -> dict[str, Any]:
    """``verify_manifest``: ``{"passed", "failures", "metrics"}``; failures in the reference's words."""
    manifest = read_manifest(manifest_path)
    if not isinstance(manifest, dict):
        raise DatasetError(f"database manifest {manifest_path} is not a JSON object")
    if manifest.get("version") not in ACCEPTED_VERSIONS:
        return {"passed": False, "metrics": {"manifest_version": manifest.get("version")},
                "failures": [f"not a v2 manifest (got version={manifest.get('version')!r}); regenerate it with "
                             "`db_manifest.py write`"]}
    failures = []
    metrics: dict[str, Any] = {"total_passages": len(db), "manifest_total_passages": manifest["total_passages"],
                               "embedding_dim": embedder.dim}
    if len(db) != manifest["total_passages"]:
        failures.append(f"total_passages mismatch: local={len(db)} manifest={manifest['total_passages']}")
    if embedder.dim != manifest["embedding_dim"]:
        failures.append(f"embedding_dim mismatch: local={embedder.dim} manifest={manifest['embedding_dim']} "
                        "(different retriever model — comparison is not meaningful)")
    params = metrics["index_params"] = db.params()
    if params != manifest["index_params"]:
        failures.append(f"index_params differ:\n    local    = {params}\n    manifest = {manifest['index_params']}")
    metrics["manifest_corpus_set_sha256"] = manifest["corpus_set_sha256"]
    metrics["corpus_set_sha256"] = corpus_set_sha256(db)  # reported, not gated (as the reference)
    k = manifest["probe_top_k"]
    ref = {r["index"]: r["top_k_urls"] for r in manifest["reference_top_k"]}
    overlaps, top1, full = [], 0, 0
    for entry in top_k_urls(db, embedder, manifest["reference_queries"], k):
        if entry["index"] not in ref:
            continue
        cand = [norm_url(u) for u in entry["top_k_urls"][:k]]
        want = [norm_url(u) for u in ref[entry["index"]][:k]]
        ov = len(set(want) & set(cand)) / (len(set(want)) or 1)
        overlaps.append(ov)
        full += ov >= 1.0
        top1 += bool(want and cand and want[0] == cand[0])
    mean = sum(overlaps) / (len(overlaps) or 1)
    metrics.update(probe_queries_total=len(overlaps), probe_queries_full_match=full, retrieval_accuracy=mean,
                   retrieval_top1_rate=top1 / len(overlaps) if overlaps else 0.0, retrieval_threshold=threshold)
    if mean < threshold:
        failures.append(f"retrieval overlap below threshold: {mean:.4f} < {threshold} — retrieval behaviour "
                        f"diverges from reference\n  {full}/{len(overlaps)} queries fully matched")
    return {"passed": not failures, "failures": failures, "metrics": metrics}


def db_accuracy(entries: list[dict[str, Any]], database: str | Path | None) -> dict[str, Any]:
    """``datasetup_accuracy_eval.evaluate_accuracy`` over LoadGen's accuracy log entries (``qsl_idx``, hex
    ``data``): one byte 1 is a successful page, 32 lowercase hexadecimal characters the returned MD5 (a success),
    anything else a failure; passed when at least 99% succeeded and the MD5 equals the saved database's
    (:func:`mlharness.kinds.pipeline.dbbuild.database_md5`; None: no database was saved)."""
    from mlharness.kinds.pipeline.dbbuild import database_md5

    by_idx = {e["qsl_idx"]: bytes.fromhex(e["data"]) for e in entries}
    ok = bad = 0
    md5 = None
    for _, data in sorted(by_idx.items()):
        text = data.decode("utf-8", errors="replace") if len(data) == 32 else ""
        if len(data) == 1:
            ok, bad = ok + (data[0] == 1), bad + (data[0] != 1)
        elif len(text) == 32 and all(c in "0123456789abcdef" for c in text):
            md5, ok = text, ok + 1
        else:
            bad += 1
    actual = database_md5(database) if database is not None and Path(database).is_dir() else None
    rate = ok / (ok + bad) if ok + bad else 0.0
    return {"passed": rate >= 0.99 and md5 is not None and md5 == actual, "total_files": ok + bad,
            "successful_files": ok, "failed_files": bad, "success_rate": rate, "min_success_rate_required": 0.99,
            "md5_response": md5, "md5_actual": actual, "md5_match": md5 is not None and md5 == actual}


def main(argv: list[str] | None = None) -> int:
    """``python -m mlharness.kinds.pipeline.dbmanifest write|verify``: ``db_manifest.py``'s two commands over a database
    folder mlharness saved (``scripts/write_db_manifest.sh`` / ``verify_db_manifest.sh``); verify exits 1 on a
    failure, printing the failures as the reference does."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mlharness.kinds.pipeline.dbmanifest", description=main.__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write a manifest from a database")
    w.add_argument("--db", required=True)
    w.add_argument("--embedder", required=True, help="the sentence-transformers folder the database was built with")
    w.add_argument("--dataset", required=True, help="frames_dataset.tsv (the probe questions)")
    w.add_argument("--output", required=True, help="the manifest (.json or .json.gz)")
    w.add_argument("--model-name", help="the retriever_model recorded (default: --embedder as given)")
    w.add_argument("--num-queries", type=int, default=NUM_PROBE_QUERIES)
    v = sub.add_parser("verify", help="verify a database against a manifest")
    v.add_argument("--db", required=True)
    v.add_argument("--embedder", required=True)
    v.add_argument("--manifest", required=True)
    v.add_argument("--retrieval-threshold", type=float, default=RETRIEVAL_THRESHOLD)
    args = parser.parse_args(argv)
    db, embedder = VectorDB.load(args.db), Embedder(args.embedder)
    if args.cmd == "write":
        m = write(db, embedder, args.dataset, args.output, args.model_name or args.embedder, args.num_queries)
        print(f"[manifest] wrote {args.output} ({len(m['reference_queries'])} reference queries, top-{PROBE_TOP_K})")
        return 0
    result = verify(db, embedder, args.manifest, args.retrieval_threshold)
    m = result["metrics"]
    print(f"[verify] index params: {m.get('index_params')}")
    if "retrieval_accuracy" in m:
        print(f"[verify] retrieval vs reference ({m['probe_queries_total']} queries): mean overlap="
              f"{m['retrieval_accuracy']:.4f} (threshold {args.retrieval_threshold}), top-1 match="
              f"{m['retrieval_top1_rate']:.3f} [reported]")
    if not result["passed"]:
        print("\n[verify] FAILED:")
        for f in result["failures"]:
            print(f"  - {f}")
        return 1
    print("\n[verify] OK — DB is behaviourally equivalent to the reference")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
