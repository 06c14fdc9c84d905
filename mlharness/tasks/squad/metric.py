"""SQuAD v1.1 accuracy as ``accuracy-squad.py`` computes it: the logged logits turned into answers
(:mod:`.postprocess`) and scored by the official v1.1 evaluation (:mod:`.evaluate`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult
from mlharness.tasks.squad.dataset import load_features, read_squad_examples, read_vocab


def score_accuracy_log(accuracy_log: Path | str, val_data: Path | str, vocab: Path | str,
                       predictions_file: Path | str | None = None, dtype: str = "float32",
                       transposed: bool = False, tokenizer: str = "slow") -> AccuracyResult:
    """accuracy-squad.py + evaluate-v1.1.py on one accuracy log.

    As the official scripts do, every question is scored: one none of whose features was logged is answered
    "empty" (so it scores 0), one with only some of its features logged is answered from those.  The first
    line is therefore the official line for any log.  When the log does not hold every feature (a run limited
    with ``--count``, a sampled log), a second line gives EM and F1 over the questions all of whose features
    were logged, labelled as a subset that is not comparable with the benchmark's figure.
    """
    from mlharness.tasks.base import subset_line
    from mlharness.tasks.squad.evaluate import evaluate, result_text
    from mlharness.tasks.squad.postprocess import decode_accuracy_log, predict_answers

    accuracy_log = Path(accuracy_log)
    examples, data = read_squad_examples(val_data)
    features = load_features(val_data, vocab, tokenizer=tokenizer, examples=examples)
    results, n_entries = decode_accuracy_log(accuracy_log, len(features), dtype, transposed)
    predictions = predict_answers(examples, features, read_vocab(vocab), results)
    if predictions_file is not None:
        Path(predictions_file).write_text(json.dumps(predictions, indent=4) + "\n")
    try:
        result = evaluate(data, predictions)
    except (KeyError, TypeError, ValueError) as e:
        raise AccuracyError(f"squad: cannot evaluate {val_data}: {e}") from e
    text = result_text(result)
    subset = None
    if len(results) < len(features):
        logged = np.zeros(len(examples), dtype=bool)
        missing = np.ones(len(features), dtype=bool)
        missing[list(results)] = False
        logged[np.unique(features.example_index)] = True
        logged[np.unique(features.example_index[missing])] = False  # a question with an unlogged feature
        covered = {examples[e].qas_id for e in np.flatnonzero(logged).tolist()}
        subset = {"questions": len(covered)}
        if covered:
            subset.update(evaluate(data, predictions, covered))
            figures = "exact_match {:.3f}, f1 {:.3f} over the questions whose every feature was logged".format(
                subset["exact_match"], subset["f1"])
        else:
            figures = "no question has all of its features in the log"
        text += subset_line(len(covered), len(examples), "questions", figures)
    return AccuracyResult(
        text=text, value=float(result["f1"]), name="f1",
        details={"exact_match": result["exact_match"], "f1": result["f1"], "questions": len(examples),
                 "subset": subset, "features_logged": len(results), "features_total": len(features),
                 "dupes": n_entries - len(results),
                 "predictions": str(predictions_file) if predictions_file is not None else None},
    )


class SquadMetric(AccuracyMetric):
    """SQuAD v1.1 EM / F1 of an accuracy log, as ``accuracy-squad.py`` computes them; writes predictions.json
    beside the log.  Options: ``val_data`` and ``vocab`` (relative to the dataset path), ``dtype``,
    ``output_transposed``, ``tokenizer`` (slow or fast)."""

    name = "squad_v1.1"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        opts = ctx.options
        paths = []
        for key, default in (("val_data", "dev-v1.1.json"), ("vocab", "vocab.txt")):
            p = Path(str(opts.get(key, default)))
            if not p.is_absolute() and ctx.dataset_path is not None:
                p = Path(ctx.dataset_path) / p
            if not p.is_file():
                raise AccuracyError(f"squad: {key} file {p} not found (dataset path {ctx.dataset_path})")
            paths.append(p)
        try:
            return score_accuracy_log(accuracy_log, paths[0], paths[1], Path(accuracy_log).parent / "predictions.json",
                                      dtype=str(opts.get("dtype", "float32")),
                                      transposed=bool(opts.get("output_transposed", False)),
                                      tokenizer=str(opts.get("tokenizer", "slow")))
        except DatasetError as e:
            raise AccuracyError(f"squad: {e}") from e


# ---- manifest helpers ------------------------------------------------------------------------------------------
