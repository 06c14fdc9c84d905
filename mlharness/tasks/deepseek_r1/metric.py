"""deepseek-r1 accuracy exactly as the official ``language/deepseek-r1/eval_accuracy.py`` computes it from an
``mlperf_log_accuracy.json``.

The official script keeps the first entry of each ``qsl_idx`` (and skips indices past the dataset), decodes each
response's hex as int32 token ids with the model's tokenizer (``skip_special_tokens=True``), grades each answer
with its dataset's parser and verdict (:mod:`.graders`; LiveCodeBench programs run in :mod:`.sandbox`), and
prints ``"\\nResults\\n"`` and ``{'exact_match': <mean of 100/0 per sample>, 'tokens_per_sample': <mean response
tokens>, 'num-samples': <n>}``: the line the submission checker's ``exact_match`` and ``TOKENS_PER_SAMPLE``
patterns read. Means are numpy float64 sums divided by the count, as pandas takes them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_json
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult
from mlharness.tasks.generative import (
    DTYPES,
    data_and_base,
    decode_responses,
    first_responses,
    guarded,
    resolve,
)

log = logging.getLogger(__name__)


def grade_texts(texts: list[str], names: list[Any], truths: list[Any], tests: list[dict[str, Any] | None],
                limits: Any = None, workers: int = 2) -> tuple[list[float], list[Any], Any]:
    """(100.0 or 0.0 per answer, the extracted answers, the isolation LiveCodeBench programs ran under or None)
    as the official ``process_dataframe``."""
    from mlharness.tasks.deepseek_r1 import graders
    from mlharness.tasks.deepseek_r1.sandbox import run_programs

    scores = [0.0] * len(texts)
    extracted: list[Any] = [None] * len(texts)
    code_jobs = []
    for i, (text, name, truth) in enumerate(zip(texts, names, truths, strict=True)):
        if graders.is_missing(name):  # pandas' groupby leaves such a row out: it keeps its 0
            log.warning("deepseek-r1: sample %d has no dataset name; scored 0 as the official script does", i)
            continue
        kind = graders.kind_of(name, f"sample {i}: ")
        extracted[i] = graders.PARSERS[kind](text)
        if extracted[i] is None or graders.is_missing(truth):
            continue
        if kind == "livecodebench":
            if extracted[i] and tests[i] is not None:
                code_jobs.append(i)
        elif graders.verdict(kind, extracted[i], truth):
            scores[i] = 100.0

    passed, isolation = run_programs([(extracted[i], tests[i] or {}) for i in code_jobs], limits, workers)
    for i, ok in zip(code_jobs, passed, strict=True):
        scores[i] = 100.0 if ok else 0.0
    return scores, extracted, isolation


def summarize(scores: list[float], token_counts: list[int]) -> dict[str, Any]:
    n = len(scores)
    return {"exact_match": float(np.asarray(scores, dtype=np.float64).sum() / n),
            "tokens_per_sample": float(np.asarray(token_counts, dtype=np.float64).sum() / n), "num-samples": n}


def result_text(result: dict[str, Any]) -> str:
    return f"\nResults\n\n{result}\n"


def load_lcb_tests(path: Path | str | None, who: str = "deepseek-r1") -> dict[str, Any]:
    """The JSON file of LiveCodeBench tests (question_id -> tests); empty without a file. ``who`` starts errors."""
    if not path:
        return {}
    # LiveCodeBench's tests of the benchmark's questions, hidden cases included, take hundreds of MiB
    tests = read_json(Path(path).expanduser(), f"{who}: the LiveCodeBench tests file", 4 * DATA_FILE_LIMIT,
                      error=AccuracyError)
    if not isinstance(tests, dict):
        raise AccuracyError(f"{who}: {path}: expected a JSON object question_id -> tests")
    return tests


def score_log(accuracy_log: Path | str, dataset_pkl: Path | str, tokenizer_dir: Path | str, dtype: str = "int32",
              lcb_tests: Path | str | None = None, limits: Any = None) -> AccuracyResult:
    """The official figures of one mlperf_log_accuracy.json."""
    from mlharness.tasks.cnndm.dataset import load_tokenizer
    from mlharness.tasks.deepseek_r1.dataset import lcb_tests_of, read_frame
    from mlharness.tasks.deepseek_r1.sandbox import describe

    if dtype not in DTYPES:
        raise AccuracyError(f"deepseek_r1_accuracy: unsupported dtype '{dtype}'; expected int32 or int64")
    accuracy_log = Path(accuracy_log)
    try:
        frame = read_frame(dataset_pkl)
        tokenizer = load_tokenizer(tokenizer_dir)
        extra = load_lcb_tests(lcb_tests)
        ids, rows, dupes = first_responses(accuracy_log, len(frame), "deepseek_r1_accuracy", dataset_pkl, dtype,
                                           outside="skip")
        tests = [lcb_tests_of(frame, r, extra) if "livecodebench" in str(frame["dataset"].iloc[r]).lower()
                 else None for r in rows]
    except DatasetError as e:
        raise AccuracyError(f"deepseek_r1_accuracy: {e}") from e
    texts = decode_responses(tokenizer, ids, "deepseek_r1_accuracy", accuracy_log, tokenizer_dir)
    scores, extracted, isolation = grade_texts(texts, [frame["dataset"].iloc[r] for r in rows],
                                               [frame["ground_truth"].iloc[r] for r in rows], tests, limits)
    result = summarize(scores, [len(x) for x in ids])
    per_kind: dict[str, list[float]] = {}
    for r, s in zip(rows, scores, strict=True):
        per_kind.setdefault(str(frame["dataset"].iloc[r]), []).append(s)
    return AccuracyResult(text=result_text(result), value=result["exact_match"], name="exact_match",
                          details={**result, "dupes": dupes, "dtype": dtype,
                                   "per_dataset": {k: float(np.mean(v)) for k, v in per_kind.items()},
                                   "scores": scores, "extracted": [None if e is None else str(e) for e in extracted],
                                   "dataset": str(dataset_pkl), "tokenizer": str(tokenizer_dir),
                                   "code_isolation": describe(isolation)})


class DeepSeekR1AccuracyMetric(AccuracyMetric):
    """exact_match of a deepseek-r1 accuracy log. Options: ``dataset_file`` (relative to the dataset path),
    ``tokenizer`` (the checkpoint folder whose tokenizer decodes the responses), ``dtype`` (int32),
    ``lcb_tests`` (JSON question_id -> tests, for a dataset without an ``lcb_tests`` column) and
    ``code_timeout`` (seconds per LiveCodeBench test; 60 as the official script)."""

    name = "deepseek_r1_accuracy"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from mlharness.tasks.deepseek_r1.dataset import DATASET_FILE
        from mlharness.tasks.deepseek_r1.sandbox import limits_from_options

        opts = ctx.options
        dataset, base = data_and_base(ctx, DATASET_FILE)
        tokenizer = resolve(str(opts.get("tokenizer", "tokenizer")), base)
        lcb = resolve(str(opts["lcb_tests"]), base) if opts.get("lcb_tests") else None
        limits = limits_from_options(opts)
        return guarded(self.name, lambda: score_log(accuracy_log, dataset, tokenizer, str(opts.get("dtype", "int32")),
                                                    lcb, limits))
