"""e2e-rag-qna's accuracy as ``e2e-rag/accuracy_eval.py`` computes it: retrieval precision, recall and F1 against
each question's expected URLs, and the LLM judge's answer accuracy.

LoadGen's accuracy log holds only the response bytes (int32 token ids, for TEST09), so the answers come from the
run's ``pipeline_results.jsonl`` (beside the log; one record per completed sample, its ``result`` the reference's
``results.json`` entry: ``query``, ``answer``, ``retrieved_urls``, ...). The accuracy log says which samples ran:
records of samples it does not hold are left out, and a sample it holds without a record is an error.

``results.json`` is rebuilt as ``reference_SUT.py`` writes it (keyed by LoadGen's query id, in completion order), and
scored as ``evaluate_results`` scores it: the ground truth looked up by the prompt's text, a result whose query is
not in the data set skipped with the reference's warning. The text is the reference's summary block, byte for
byte, then the ``Accuracy:`` line it writes to accuracy.txt (the submission checker's ``E2E_ACCURACY`` pattern).

The reference adds each query's precision, recall and F1 in the order its judge calls complete, so two runs of
it may sum in different orders; the printed three decimals can then differ only where the exact mean lies within
a few ulps of a rounding boundary. Here the sums are exactly rounded (``math.fsum``), the value every order
approximates; answer accuracy is a count and never depends on order.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from mlharness.errors import AccuracyError
from mlharness.fileguard import iter_jsonl
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult, accuracy_log_entries
from mlharness.tasks.e2e_rag.dataset import ground_truth_by_query, read_frames
from mlharness.tasks.e2e_rag.judge import (
    DEFAULT_JUDGE_MODEL,
    DEFAULT_JUDGE_URL,
    DEFAULT_TIMEOUT_S,
    JudgeClient,
)

NAME = "e2e_rag_qna"
RESULTS_FILE = "pipeline_results.jsonl"
BAR = "=" * 80


def retrieval_metrics(retrieved_urls: list[str], expected_urls: list[str]) -> dict[str, float]:
    """``calculate_retrieval_metrics``: set precision, recall and F1 of the retrieved URLs."""
    retrieved, expected = set(retrieved_urls), set(expected_urls)
    if not expected:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    correct = retrieved & expected
    precision = len(correct) / len(retrieved) if retrieved else 0.0
    recall = len(correct) / len(expected)
    f1 = 2 * precision * recall / (precision + recall) if (precision + recall) > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _record_index(record: dict[str, Any]) -> int | None:
    for key in ("qsl_idx", "index", "sample"):
        if isinstance(record.get(key), int):
            return record[key]
    return None


def read_records(path: Path) -> dict[int, dict[str, Any]]:
    """The pipeline's records by sample index (a later record of the same sample wins, as a later response)."""
    records: dict[int, dict[str, Any]] = {}
    # a record holds one sample's answer, contexts and timings: kilobytes; the door's line bound (64 MiB) holds any
    lines = iter_jsonl(Path(path), "the pipeline's records", error=lambda m: AccuracyError(
        f"{NAME}: {m} (the answers are there, not in the accuracy log)"), allow_nan=True)
    for n, record in lines:
        index = _record_index(record) if isinstance(record, dict) else None
        if index is None:
            raise AccuracyError(f"{NAME}: {path}, line {n}: a record needs an integer 'qsl_idx' (the sample)")
        records[index] = record
    return records


def build_results(accuracy_log: Path, questions: list[Any], records_path: Path | None = None) -> dict[str, Any]:
    """``results.json`` as ``reference_SUT.py`` saves it, for the samples the accuracy log holds: query id ->
    the record's ``result``; a failed sample gets the reference's error entry (answer ``Error``)."""
    records = read_records(records_path or Path(accuracy_log).parent / RESULTS_FILE)
    results: dict[str, Any] = {}
    for entry in accuracy_log_entries(accuracy_log):
        record = records.get(entry.qsl_idx)
        if record is None:
            raise AccuracyError(f"{NAME}: {accuracy_log}: {entry.where} has no record in {RESULTS_FILE}: the "
                                f"answer of that sample is unknown")
        key = str(record.get("query_id", record.get("id", entry.qsl_idx)))
        result = record.get("result")
        if not isinstance(result, dict):
            query = questions[entry.qsl_idx].query if 0 <= entry.qsl_idx < len(questions) else ""
            err = record.get("error") or "no result"
            if isinstance(err, dict):  # the pipeline SUT's {stage, sample, error}
                err = f"stage {err.get('stage')!r}: {err.get('error')}"
            result = {"query": query, "answer": "Error", "error": str(err)}
        results[key] = result
    return results


def evaluate(results: dict[str, Any], questions: list[Any], judge: JudgeClient,
             num_workers: int = 4) -> dict[str, Any]:
    """``evaluate_results``: every result judged (``num_workers`` calls at a time) and its retrieval scored. The
    first judge failure (in ``errors="raise"``) stops the rest and is raised, naming its sample."""
    by_query = ground_truth_by_query(questions)
    index_of = {q.query: q.index for q in questions}
    warnings: list[str] = []

    def one(query_id: str, result: dict[str, Any]) -> dict[str, Any] | None:
        query, answer = result.get("query", ""), result.get("answer", "")
        gt = by_query.get(query)
        if gt is None:
            warnings.append(f"Warning: No ground truth for query: {query[:50]}...")
            return None
        scores = retrieval_metrics(result.get("retrieved_urls", []), list(gt.expected_urls))
        verdict = judge.judge(query, gt.ground_truth, answer, sample=index_of.get(query))
        return {"query_id": query_id, "query": query, "retrieval_precision": scores["precision"],
                "retrieval_recall": scores["recall"], "retrieval_f1": scores["f1"],
                "answer_correct": 1 if verdict.correct else 0, "judge_reasoning": verdict.reasoning,
                "llm_answer": answer, "ground_truth": gt.ground_truth, "judge_error": verdict.error}

    with ThreadPoolExecutor(max_workers=max(1, num_workers)) as pool:
        futures = [pool.submit(one, qid, r) for qid, r in results.items()]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            for f in pending:
                f.cancel()
            raise failed[0].exception()  # type: ignore[misc]
    detailed = [r for r in (f.result() for f in futures) if r is not None]
    n = len(detailed)

    def mean(key: str) -> float:
        return math.fsum(r[key] for r in detailed) / n if n else 0.0

    return {"total_queries": n, "retrieval_precision": mean("retrieval_precision"),
            "retrieval_recall": mean("retrieval_recall"), "retrieval_f1": mean("retrieval_f1"),
            "answer_accuracy": sum(r["answer_correct"] for r in detailed) / n if n else 0.0,
            "detailed_results": detailed, "warnings": warnings,
            "judge_errors": sum(1 for r in detailed if r["judge_error"])}


def summary_text(metrics: dict[str, Any]) -> str:
    """What ``accuracy_eval.py``'s ``main`` prints after scoring, byte for byte."""
    return (f"\n{BAR}\nACCURACY EVALUATION RESULTS\n{BAR}\n"
            f"Total Queries:        {metrics['total_queries']}\n"
            f"\nRetrieval Metrics:\n"
            f"  Precision@N:        {metrics['retrieval_precision']:.3f}\n"
            f"  Recall@N:           {metrics['retrieval_recall']:.3f}\n"
            f"  F1@N:               {metrics['retrieval_f1']:.3f}\n"
            f"\nAnswer Quality:\n"
            f"  LLM Judge Accuracy: {metrics['answer_accuracy']:.3f}\n"
            f"{BAR}\n\n")


def accuracy_line(metrics: dict[str, Any]) -> str:
    """The line ``accuracy_eval.py`` writes to accuracy.txt (percent, four decimals)."""
    return f"Accuracy: {metrics['answer_accuracy'] * 100:.4f}\n"


JUDGE_URL_ENV = "MLHARNESS_JUDGE_URL"  # overrides a manifest's accuracy.options.judge_url (a run's judge elsewhere)


def judge_from_options(options: dict[str, Any]) -> JudgeClient:
    return JudgeClient(url=str(options.get("judge_url", DEFAULT_JUDGE_URL)),
                       model=str(options.get("judge_model", DEFAULT_JUDGE_MODEL)),
                       timeout_s=float(options.get("judge_timeout_s", DEFAULT_TIMEOUT_S)),
                       errors=str(options.get("judge_errors", "raise")))


def score_log(accuracy_log: Path, dataset: Path, options: dict[str, Any] | None = None,
              records_path: Path | None = None, results_out: Path | None = None) -> AccuracyResult:
    """Score a run: its accuracy log, its pipeline records and the FRAMES TSV, judged as ``options`` say
    (``judge_url``, ``judge_model``, ``judge_timeout_s``, ``judge_errors``, ``num_workers``)."""
    options = dict(options or {})
    questions = read_frames(dataset)
    results = build_results(accuracy_log, questions, records_path)
    if results_out is not None:
        Path(results_out).write_text(json.dumps(results, indent=2))
    metrics = evaluate(results, questions, judge_from_options(options), int(options.get("num_workers", 4)))
    text = "".join(w + "\n" for w in metrics["warnings"]) + summary_text(metrics)
    if metrics["judge_errors"]:
        text += (f"judge errors counted as wrong answers (judge_errors: wrong, as accuracy_eval.py counts them): "
                 f"{metrics['judge_errors']} of {metrics['total_queries']}\n")
    text += accuracy_line(metrics)
    return AccuracyResult(text=text, value=round(metrics["answer_accuracy"] * 100, 4), name="E2E_ACCURACY",
                          details={k: v for k, v in metrics.items() if k != "detailed_results"})


def run_options(options: dict[str, Any]) -> dict[str, Any]:
    """The manifest's accuracy.options with the run's judge (MLHARNESS_JUDGE_URL), which wins over judge_url."""
    options = dict(options)
    if os.environ.get(JUDGE_URL_ENV):
        options["judge_url"] = os.environ[JUDGE_URL_ENV]
    return options


def judge_listens(url: str, timeout_s: float = 5.0) -> None:
    """AccuracyError unless something accepts connections at the judge's host and port: checked before the model
    loads, so a judge that is not started fails in seconds, not after every question has been answered."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s):
            pass
    except OSError as e:
        raise AccuracyError(
            f"{NAME}: the judge at {url} does not answer ({e}). Start an OpenAI-compatible judge there (the "
            f"reference's is {DEFAULT_JUDGE_MODEL}), or the deterministic stand-in `python -m "
            f"mlharness.tasks.e2e_rag.judge_server --port {port}` (not an LLM: its scores are no official figure), "
            f"or name another with accuracy.options.judge_url or {JUDGE_URL_ENV}") from None


class E2ERagQnaMetric(AccuracyMetric):
    name = NAME

    def preflight(self, options: dict[str, Any]) -> None:
        judge_listens(judge_from_options(run_options(options)).url)

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        if ctx.dataset_path is None:
            raise AccuracyError(f"{NAME}: needs the dataset path (frames_dataset.tsv or its folder)")
        return score_log(accuracy_log, ctx.dataset_path, run_options(ctx.options))


DB_NAME = "e2e_rag_db"


def built_database(accuracy_log: Path, samples: set[int], records_path: Path | None = None) -> Path | None:
    """The database folder the run's build saved: the ``database`` of the ``result`` of the page that saved it
    (``rag-db-build``), among the records of the samples the accuracy log holds; None when no page saved one (the
    build never completed: the verdict fails on the MD5)."""
    path = records_path or Path(accuracy_log).parent / RESULTS_FILE
    named = [r["result"]["database"] for i, r in sorted(read_records(path).items())
             if i in samples and isinstance(r.get("result"), dict) and r["result"].get("database")]
    return Path(str(named[-1])) if named else None


def db_score(accuracy_log: Path, options: dict[str, Any]) -> AccuracyResult:
    """e2e-rag-db's accuracy: ``datasetup_accuracy_eval.py``'s verdict (at least 99% of the pages built and the MD5
    the last page answered equal to the saved database's), and where ``db_manifest`` names a manifest, its
    verification as ``verify_db_manifest.sh`` runs it (``embedder``: the model folder the database was built with).
    The official script prints no figure; the checker reads ``Accuracy:`` against 98, so the line here is the
    pages' success rate in percent when every check passed and 0 when one failed: the checker then passes exactly
    the databases the reference's verdict passes. The database scored is the one this run saved: the folder its
    ``pipeline_results.jsonl`` (beside the log) names (:func:`built_database`), not a shared one a later run may
    have replaced."""
    from mlharness.kinds.pipeline.dbmanifest import db_accuracy
    from mlharness.manifest.assets import cache_dir
    from mlharness.paths import MANIFESTS_DIR

    entries = [{"qsl_idx": e.qsl_idx, "data": e.raw.get("data", "")} for e in accuracy_log_entries(accuracy_log)]
    database = built_database(accuracy_log, {e["qsl_idx"] for e in entries})
    r = db_accuracy(entries, database)
    lines = [BAR, "Accuracy Results:", BAR, f"  Total files processed: {r['total_files']}",
             f"  Successful: {r['successful_files']}", f"  Failed: {r['failed_files']}",
             f"  Success rate: {100.0 * r['success_rate']:.2f}%", "", f"  MD5 returned: {r['md5_response']}",
             f"  MD5 actual:   {r['md5_actual']}", f"  MD5 match: {'PASS' if r['md5_match'] else 'FAIL'}",
             f"  Database: {database or 'none saved (no page of the run saved the database)'}", ""]
    passed = r["passed"]
    if options.get("db_manifest"):
        from mlharness.kinds.pipeline.dbmanifest import verify
        from mlharness.kinds.pipeline.index import Embedder, VectorDB

        manifest = Path(str(options["db_manifest"]))
        if not manifest.is_absolute() and not manifest.exists():
            manifest = MANIFESTS_DIR / "e2e-rag-db" / manifest  # beside the built-in manifests
        embedder = Path(str(options.get("embedder", "")))
        embedder = embedder if embedder.is_absolute() else cache_dir() / embedder
        if database is None or not database.is_dir():
            v = {"passed": False, "failures": [f"database not found: {database}"]}
        else:
            v = verify(VectorDB.load(database), Embedder(str(embedder)), manifest)
        lines += ["DB Manifest Verification", f"Manifest: {manifest}",
                  "  Manifest verification PASSED" if v["passed"] else "  Manifest verification FAILED"]
        lines += [f"  - {f}" for f in v["failures"]] + [""]
        passed = passed and v["passed"]
        r["manifest_passed"] = v["passed"]
    figure = 100.0 * r["success_rate"] if passed else 0.0
    lines += [f"Overall: {'PASSED' if passed else 'FAILED'}", BAR, f"Accuracy: {figure:.4f}"]
    return AccuracyResult(text="\n".join(lines) + "\n", value=round(figure, 4), name="E2E_ACCURACY", details=r)


class E2ERagDbMetric(AccuracyMetric):
    name = DB_NAME

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        return db_score(accuracy_log, ctx.options)
