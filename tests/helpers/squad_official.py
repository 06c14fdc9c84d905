"""The official SQuAD v1.1 rule (evaluate-v1.1.py as accuracy-squad.py runs it) written out independently of
mlharness's scorer, for tests to compute expected accuracy lines."""

from __future__ import annotations

import json
import re
import string
from collections import Counter


def _normalize(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def _f1(pred: str, truth: str) -> float:
    p, t = _normalize(pred).split(), _normalize(truth).split()
    same = sum((Counter(p) & Counter(t)).values())
    if same == 0:
        return 0
    precision, recall = same / len(p), same / len(t)
    return 2 * precision * recall / (precision + recall)


def official_line(dev: dict, predictions: dict[str, str]) -> str:
    """evaluate-v1.1.py: EM and F1 in percent over EVERY question; a question without a prediction scores 0."""
    em = f1 = total = 0
    for article in dev["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                truths = [a["text"] for a in qa["answers"]]
                em += max(_normalize(predictions[qa["id"]]) == _normalize(t) for t in truths)
                f1 += max(_f1(predictions[qa["id"]], t) for t in truths)
    return json.dumps({"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total})
