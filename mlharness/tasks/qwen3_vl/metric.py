"""qwen3-vl-235b-a22b accuracy exactly as the official ``multimodal/qwen3-vl`` ``evaluation.py``
(``run_evaluation``) computes it.

Every entry of the accuracy log counts (repeats included); its ``data`` is the response text as UTF-8 bytes,
validated as a ``ProductMetadata`` JSON object (``model_validate_json``: a fenced or malformed answer, a missing or
extra field, a wrong type is *unparsable*). An unparsable response is scored as a category of padding levels (as
many as the ground truth has, none of them right), a padding brand and a random ``is_secondhand``. Scores:

- ``f1`` (accuracy.txt, the figure the checker reads as F1_HIERARCHICAL): hierarchical F1 of the categories, the
  longest common prefix of " > "-separated levels, precision and recall summed over all entries;
- brand F1: the share of brands whose ``rapidfuzz.fuzz.ratio`` to the truth (both stripped, lower case) is
  over 90; is_secondhand F1: ``sklearn.metrics.f1_score``;
- the random baselines: a random candidate category, a random is_secondhand, a random brand of those seen.

The random draws follow the reference's seeded generators: a master ``np.random.default_rng(seed)`` (seed 12345)
draws one seed per chunk of the log, each chunk draws with its own generator in log order, and the chunks are
``len(log) // jobs`` entries long with ``jobs = min(os.cpu_count(), 4)`` (the option ``jobs`` sets it). The
``f1`` line never depends on them (a padded category matches nothing); the is_secondhand F1 does when a response
is unparsable, and the random baselines do. The random brand baseline draws from ``list(set(brands))``, whose
order depends on the process's string hash seed, in the reference as here: it is not reproducible across
processes unless ``PYTHONHASHSEED`` is fixed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult, accuracy_log_entries
from mlharness.tasks.generative import guarded

log = logging.getLogger(__name__)

SEPARATOR = " > "
CATEGORY_PAD = "<|__PRED_CATEGORY_PAD__|>"
BRAND_PAD = "<|__PRED_BRAND_PAD__|>"
MAX_JOBS = 4
DEFAULT_SEED = 12345
BRAND_THRESHOLD = 90


def hierarchical_components(predicted: str, truth: str) -> tuple[int, int, int]:
    pred = [c.strip() for c in predicted.split(SEPARATOR)]
    true = [c.strip() for c in truth.split(SEPARATOR)]
    common = 0
    for p, t in zip(pred, true, strict=False):
        if p != t:
            break
        common += 1
    return common, len(pred), len(true)


def hierarchical_f1(pairs: list[tuple[str, str]]) -> float:
    inter = pred_len = true_len = 0
    for predicted, truth in pairs:
        i, p, t = hierarchical_components(predicted, truth)
        inter, pred_len, true_len = inter + i, pred_len + p, true_len + t
    hp = inter / pred_len if pred_len > 0 else 0.0
    hr = inter / true_len if true_len > 0 else 0.0
    return 0.0 if hp + hr == 0 else 2 * (hp * hr) / (hp + hr)


def brand_f1(pairs: list[tuple[str, str]]) -> float:
    from rapidfuzz import fuzz

    matches = [1 if fuzz.ratio(truth.strip().lower(), pred.strip().lower()) > BRAND_THRESHOLD else 0
               for pred, truth in pairs]
    return sum(matches) / len(matches)


def secondhand_f1(pairs: list[tuple[bool, bool]]) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score([t for _, t in pairs], [p for p, _ in pairs]))


def accuracy_text(f1: float) -> str:
    """accuracy.txt as ``run_evaluation`` writes it (no newline at the end)."""
    data = json.dumps({"f1": f1}, sort_keys=True)
    return f"Results\n\n{data}\n\nhash={hashlib.sha256(data.encode()).hexdigest()}"


def _chunk(entries: list[tuple[int, str]], seed: int, rows: Any) -> dict[str, Any]:
    """One chunk of ``_process_chunk``: the same draws, in the same order."""
    from pydantic import ValidationError

    from mlharness.tasks.qwen3_vl.prompt import ProductMetadata

    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"unparsable": 0, "category": [], "rand_category": [], "secondhand": [],
                           "rand_secondhand": [], "brand": [], "brands": set()}
    for idx, response in entries:
        truth = rows(idx)
        out["brands"].add(truth["ground_truth_brand"])
        try:
            pred = ProductMetadata.model_validate_json(response)
            category, brand, secondhand = pred.category, pred.brand, pred.is_secondhand
        except ValidationError:
            out["unparsable"] += 1
            category = SEPARATOR.join([CATEGORY_PAD] * len(truth["ground_truth_category"].split(SEPARATOR)))
            brand, secondhand = BRAND_PAD, rng.choice([True, False], size=1).tolist()[0]
            log.debug("sample %d: the response cannot be validated against the expected schema", idx)
        out["category"].append((category, truth["ground_truth_category"]))
        out["secondhand"].append((secondhand, truth["ground_truth_is_secondhand"]))
        out["brand"].append((brand, truth["ground_truth_brand"]))
        out["rand_category"].append((rng.choice(truth["potential_product_categories"]),
                                     truth["ground_truth_category"]))
        out["rand_secondhand"].append((rng.choice([True, False]), truth["ground_truth_is_secondhand"]))
    out["brands"] = list(out["brands"])
    return out


def score_log(accuracy_log: Path, dataset: Path | str, seed: int = DEFAULT_SEED,
              jobs: int | None = None) -> AccuracyResult:
    """Score an accuracy log of UTF-8 text responses against the catalogue folder ``dataset``."""
    from mlharness.tasks.qwen3_vl.dataset import CatalogueData

    who = "qwen3_vl_f1"
    data = CatalogueData(dataset, with_images=False)
    entries: list[tuple[int, str]] = []
    for entry in accuracy_log_entries(accuracy_log):
        if not 0 <= entry.qsl_idx < len(data):
            raise AccuracyError(f"{who}: {accuracy_log}: {entry.where} is outside the {len(data)} samples of "
                                f"{dataset}")
        try:
            entries.append((entry.qsl_idx, entry.data(accuracy_log).decode("utf-8")))
        except UnicodeDecodeError as e:
            raise AccuracyError(f"{who}: {accuracy_log}: {entry.where}: the response is not UTF-8 text ({e}); "
                                "qwen3-vl responses are logged as text (response.text: true)") from e
    if not entries:
        raise AccuracyError(f"{who}: accuracy log {accuracy_log} has no entries; nothing to score")
    jobs = jobs or min(os.cpu_count() or 1, MAX_JOBS)
    master = np.random.default_rng(seed=seed)
    size = max(len(entries) // jobs, 1)
    chunks = [entries[i:i + size] for i in range(0, len(entries), size)]
    seeds = master.integers(0, 2**32, size=len(chunks))
    results = [_chunk(c, s, data.row) for c, s in zip(chunks, seeds, strict=True)]

    def joined(key: str) -> list[Any]:
        return [x for r in results for x in r[key]]

    f1 = hierarchical_f1(joined("category"))
    brands = list(set(joined("brands")))
    random_brands = master.choice(brands, size=len(entries))
    details = {
        "unparsable_responses": sum(r["unparsable"] for r in results),
        "category_f1": f1,
        "brand_f1": brand_f1(joined("brand")),
        "is_secondhand_f1": secondhand_f1(joined("secondhand")),
        "random_category_f1": hierarchical_f1(joined("rand_category")),
        "random_brand_f1": brand_f1([(str(b), data.row(i)["ground_truth_brand"])
                                     for b, (i, _) in zip(random_brands, entries, strict=True)]),
        "random_is_secondhand_f1": secondhand_f1(joined("rand_secondhand")),
        "entries": len(entries), "jobs": jobs, "seed": seed, "dataset": str(dataset),
    }
    return AccuracyResult(text=accuracy_text(f1), value=f1, name="f1", details=details)


class Qwen3VLF1Metric(AccuracyMetric):
    """The hierarchical category F1 of a qwen3-vl-235b-a22b accuracy log against the run's catalogue folder.
    Options: ``seed`` (12345, the reference's default) and ``jobs`` (the reference's chunk count,
    ``min(os.cpu_count(), 4)`` by default; only the random figures and, with unparsable responses, the
    is_secondhand F1 depend on it)."""

    name = "qwen3_vl_f1"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        if ctx.dataset_path is None:
            raise AccuracyError(f"{self.name}: the run has no dataset folder to score against")
        opts = ctx.options
        seed = int(opts.get("seed", DEFAULT_SEED))
        jobs = int(opts["jobs"]) if opts.get("jobs") is not None else None
        if jobs is not None and not 1 <= jobs <= 1024:
            raise AccuracyError(f"{self.name}: option 'jobs' must be a whole number from 1 to 1024, got {jobs}")
        return guarded(self.name, lambda: score_log(accuracy_log, Path(ctx.dataset_path), seed, jobs))
