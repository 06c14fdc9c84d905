"""llama2-70b accuracy exactly as the official ``language/llama2-70b/evaluate-accuracy.py`` computes it, offline.

The official script: keep the first entry of each ``qsl_idx``; decode each response's hex as int32 (it is run
with ``--dtype int32``; its default is int64) and the ids with the model's tokenizer, skipping special tokens;
strip predictions and targets (the pickle's ``output`` column), split each into sentences with NLTK's Punkt and
join them with newlines; score every pair with ROUGE-1/2/L/Lsum (``evaluate``'s rouge: ``rouge-score`` with the
Porter stemmer); report each metric's mean per-sample F1 × 100 rounded to 4 places (numbers, not strings),
``gen_len`` (characters of the split predictions), ``gen_num``, ``gen_tok_len`` (response tokens, EOS included)
and ``tokens_per_sample`` (``gen_tok_len / gen_num`` to one place). It prints ``"\\nResults\\n"`` and the dict.

Differences, none in the figures: nothing is downloaded (the sentence split and ROUGE of
:mod:`mlharness.tasks.cnndm.metric`); the figures are plain Python numbers, printed as numpy 1 prints its
scalars (numpy 2 would print ``np.float64(...)``, which the submission checker's patterns cannot read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult
from mlharness.tasks.cnndm.metric import result_text, rouge_scores, sent_split
from mlharness.tasks.generative import (
    DTYPES,
    data_and_base,
    decode_responses,
    first_responses,
    guarded,
    resolve,
)


def summarize(predictions: list[str], references: list[str], token_counts: list[int]) -> dict[str, Any]:
    """The official result dict from decoded predictions and targets (both before the sentence split)."""
    preds = [sent_split(p) for p in predictions]
    targets = [sent_split(t) for t in references]
    result: dict[str, Any] = {k: float(round(np.mean(v) * 100, 4)) for k, v in rouge_scores(preds, targets).items()}
    gen_num = len(preds)
    gen_tok_len = int(sum(token_counts))
    result.update({"gen_len": int(np.sum([len(p) for p in preds])), "gen_num": gen_num, "gen_tok_len": gen_tok_len,
                   "tokens_per_sample": round(gen_tok_len / gen_num, 1)})
    return result


def score_log(accuracy_log: Path | str, dataset_pickle: Path | str, tokenizer_dir: Path | str,
              dtype: str = "int32") -> AccuracyResult:
    """The official figures of one mlperf_log_accuracy.json."""
    from mlharness.tasks.openorca.dataset import load_tokenizer, read_frame, targets_of

    if dtype not in DTYPES:
        raise AccuracyError(f"openorca_rouge: unsupported dtype '{dtype}'; expected int32 or int64")
    accuracy_log = Path(accuracy_log)
    try:
        targets = targets_of(read_frame(dataset_pickle), dataset_pickle)
        tokenizer = load_tokenizer(tokenizer_dir)
    except DatasetError as e:
        raise AccuracyError(f"openorca_rouge: {e}") from e
    ids, rows, dupes = first_responses(accuracy_log, len(targets), "openorca_rouge", dataset_pickle, dtype)
    decoded = decode_responses(tokenizer, ids, "openorca_rouge", accuracy_log, tokenizer_dir)
    result = summarize(decoded, [targets[r] for r in rows], [len(x) for x in ids])
    return AccuracyResult(text=result_text(result), value=result["rouge1"], name="rouge1",
                          details={**result, "dupes": dupes, "dtype": dtype,
                                   "dataset": str(dataset_pickle), "tokenizer": str(tokenizer_dir)})


class OpenOrcaRougeMetric(AccuracyMetric):
    """ROUGE of a llama2-70b accuracy log. Options: ``dataset_file`` (the pickle, relative to the dataset path),
    ``tokenizer`` (the checkpoint folder whose tokenizer decodes the responses; relative to the dataset path,
    ``~`` expanded), ``dtype`` (int32)."""

    name = "openorca_rouge"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from mlharness.tasks.openorca.dataset import DATASET_FILE

        opts = ctx.options
        dataset_pickle, base = data_and_base(ctx, DATASET_FILE)
        tokenizer = resolve(str(opts.get("tokenizer", "tokenizer")), base)
        return guarded(self.name, lambda: score_log(accuracy_log, dataset_pickle, tokenizer,
                                                    str(opts.get("dtype", "int32"))))
