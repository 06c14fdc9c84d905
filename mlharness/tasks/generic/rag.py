"""``rag_qa``: a generic accuracy for any RAG pipeline manifest (not MLPerf's e2e-rag-qna, which has its judge).

A pipeline's answers are not in LoadGen's accuracy log (it holds only the response bytes); they are in the run's
``pipeline_results.jsonl`` beside it, one record per completed sample whose ``result`` the manifest's postprocess
makes from the last item. This metric reads, from each result:

- ``answer``: the generated text;
- ``ground_truths`` (a list of acceptable answers) or ``ground_truth`` (one);
- ``retrieved_urls`` (nearest first), or ``passages`` (``[{"url", ...}]``, nearest first): a page counts once, at
  its first place (:func:`mlharness.tasks.e2e_rag.hooks.retrieved_urls`, as the reference builds the list);
- ``expected_urls``: the pages that hold the answer.

Answers score as SQuAD v1.1 scores them (the project's copy of the official ``evaluate-v1.1.py``: answers
normalised, the best ground truth's exact match and token F1); retrieval as recall@k, the share of a question's
expected URLs among its first ``k`` retrieved passages' URLs (``accuracy.options.k``; all retrieved passages
without it), averaged over the questions that expect any URL. Figures are percentages over the samples the
accuracy log holds; a sample that failed (no result) counts 0 on every figure. Headline: exact match.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mlharness.errors import AccuracyError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult, accuracy_log_entries
from mlharness.tasks.e2e_rag.hooks import retrieved_urls
from mlharness.tasks.e2e_rag.metric import read_records
from mlharness.tasks.squad.evaluate import exact_match_score, f1_score, metric_max_over_ground_truths

NAME = "rag_qa"
RESULTS_FILE = "pipeline_results.jsonl"


def ground_truths(result: dict[str, Any], where: str) -> list[str]:
    truths = result.get("ground_truths")
    if truths is None and result.get("ground_truth") is not None:
        truths = [result["ground_truth"]]
    if not isinstance(truths, list) or not truths or not all(isinstance(t, str) for t in truths):
        raise AccuracyError(f"{NAME}: {where}: the result needs 'ground_truths' (a non-empty list of strings) or "
                            f"'ground_truth' (a string), which the manifest's postprocess copies from the item; "
                            f"got keys {sorted(result)}")
    return truths


def recall_at_k(retrieved: list[str], expected: list[str], k: int | None) -> float:
    """The share of the expected URLs among the first ``k`` retrieved ones (all of them when ``k`` is None)."""
    top = set(retrieved if k is None else retrieved[:k])
    want = set(expected)
    return len(top & want) / len(want)


def score_one(result: dict[str, Any] | None, k: int | None, where: str) -> dict[str, Any]:
    """One sample's exact match (0/1), F1 (0..1) and recall@k (None when it expects no URL)."""
    if not isinstance(result, dict):
        return {"em": 0.0, "f1": 0.0, "recall": 0.0, "failed": True}
    truths = ground_truths(result, where)
    answer = result.get("answer")
    if not isinstance(answer, str):
        raise AccuracyError(f"{NAME}: {where}: the result has no 'answer' text (got {type(answer).__name__})")
    expected = [str(u) for u in result.get("expected_urls") or []]
    return {"em": float(metric_max_over_ground_truths(exact_match_score, answer, truths)),
            "f1": float(metric_max_over_ground_truths(f1_score, answer, truths)),
            "recall": recall_at_k(retrieved_urls(result), expected, k) if expected else None, "failed": False}


def score_records(accuracy_log: Path, records_path: Path | None = None, k: int | None = None) -> dict[str, Any]:
    """The figures over the samples of the accuracy log, each scored from its record's result."""
    records = read_records(records_path or Path(accuracy_log).parent / RESULTS_FILE)
    scores = []
    seen: set[int] = set()
    for entry in accuracy_log_entries(accuracy_log):
        if entry.qsl_idx in seen:
            continue
        seen.add(entry.qsl_idx)
        record = records.get(entry.qsl_idx)
        if record is None:
            raise AccuracyError(f"{NAME}: {accuracy_log}: {entry.where} has no record in {RESULTS_FILE}: the answer "
                                f"of that sample is unknown")
        scores.append(score_one(record.get("result"), k, f"{RESULTS_FILE}, sample {entry.qsl_idx}"))
    if not scores:
        raise AccuracyError(f"{NAME}: {accuracy_log}: no samples to score")
    n = len(scores)
    recalls = [s["recall"] if not s["failed"] else 0.0 for s in scores if s["failed"] or s["recall"] is not None]
    return {"samples": n, "failed": sum(s["failed"] for s in scores),
            "exact_match": 100.0 * math.fsum(s["em"] for s in scores) / n,
            "f1": 100.0 * math.fsum(s["f1"] for s in scores) / n,
            "recall_at_k": 100.0 * math.fsum(recalls) / len(recalls) if recalls else None,
            "recall_questions": len(recalls), "k": k}


class RagQa(AccuracyMetric):
    name = NAME

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        k = ctx.options.get("k")
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
            raise AccuracyError(f"{NAME}: accuracy.options.k is {k!r}; expected a whole number >= 1 (the passages "
                                f"recall@k looks at) or nothing (all of them)")
        m = score_records(accuracy_log, k=k)
        at = f"@{k}" if k else "@all"
        recall = f"{m['recall_at_k']:.3f}" if m["recall_at_k"] is not None else "n/a (no expected URLs)"
        text = (f"exact_match {m['exact_match']:.3f}, f1 {m['f1']:.3f}, recall{at} {recall} over {m['samples']} "
                f"samples ({m['failed']} failed)\n")
        return AccuracyResult(text=text, value=round(m["exact_match"], 4), name="exact_match", details=m)
