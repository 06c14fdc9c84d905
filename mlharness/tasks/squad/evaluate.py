"""The official SQuAD v1.1 evaluation (``evaluate-v1.1.py``), as MLPerf's BERT benchmark runs it.

Answers are normalised (lower case, punctuation removed, the articles a/an/the removed, whitespace collapsed),
then each prediction gets the exact-match and token-F1 scores of its best ground truth; the totals are percentages
over every question of the dataset.  The printed line is ``json.dumps({"exact_match": EM, "f1": F1})``: that is
the content of accuracy.txt, so the arithmetic (Python ints for no overlap, booleans summed for EM) follows the
official script exactly, floats included.
"""

from __future__ import annotations

import json
import logging
import re
import string
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from typing import Any

log = logging.getLogger(__name__)

EXPECTED_VERSION = "1.1"
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (the official order of steps)."""
    text = s.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def f1_score(prediction: str, ground_truth: str) -> float:
    """Token-level F1 between the normalised strings; 0 when they share no token."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(metric_fn: Callable[[str, str], Any], prediction: str,
                                  ground_truths: Iterable[str]) -> Any:
    return max(metric_fn(prediction, ground_truth) for ground_truth in ground_truths)


def evaluate(dataset: list[dict[str, Any]], predictions: dict[str, str],
             only: Collection[str] | None = None) -> dict[str, float]:
    """``{"exact_match": EM, "f1": F1}`` in percent over the questions of ``dataset`` (the json's ``data``).

    A question without a prediction scores 0, as in the official script.  ``only`` restricts the evaluation to
    those question ids (a run limited with ``--count`` covers only part of the dataset); with ``None`` every
    question counts, exactly as the official script does.
    """
    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if only is not None and qa["id"] not in only:
                    continue
                total += 1
                if qa["id"] not in predictions:
                    log.warning("Unanswered question %s will receive score 0.", qa["id"])
                    continue
                ground_truths = [answer["text"] for answer in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += metric_max_over_ground_truths(exact_match_score, prediction, ground_truths)
                f1 += metric_max_over_ground_truths(f1_score, prediction, ground_truths)
    if total == 0:
        raise ValueError("no question to evaluate")
    exact_match = 100.0 * exact_match / total
    f1 = 100.0 * f1 / total
    return {"exact_match": exact_match, "f1": f1}


def result_text(result: dict[str, float]) -> str:
    """What the official script prints (``print(json.dumps(...))``): the content of accuracy.txt."""
    return json.dumps(result) + "\n"
