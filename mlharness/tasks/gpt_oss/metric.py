"""gpt-oss-120b accuracy exactly as the official ``language/gpt-oss-120b/eval_mlperf_accuracy.py`` computes it.

Every entry of the log counts (the script keeps repeats); an entry whose ``qsl_idx`` is outside the reference
file is skipped. Its ``data`` is read as little-endian int32 token ids and decoded with the model's tokenizer,
special tokens kept. The sample's family is the reference row's ``dataset`` in lower case; the first evaluator
key it contains, in the order ``gpqa``, ``mmlu_pro``, ``math500``, ``aime``, ``livecodebench``, ``mmlu``, scores
it:

- multiple choice (``gpqa``: A-D; ``mmlu_pro`` / ``mmlu``: A-J): the answer is taken from the Harmony final channel
  (``<|channel|>final...<|message|>`` up to ``<|return|>``; the whole text when there is none), bold markers
  removed: a leading option letter, else ``Answer: X`` there, else the last ``ANSWER`` / ``FINAL ANSWER`` letter
  of the whole text, else (A-J only) the last standalone letter of the final section; it must equal the ground
  truth, case-insensitively;
- ``aime``: the last ``\\boxed{N}`` of the whole text, else the last ``Answer: N``; an integer 0-999 equal to the
  ground truth;
- ``math500``: the content of the last ``\\boxed{...}`` (braces matched), graded by PRM800K's grader
  (:mod:`mlharness.tasks.deepseek_r1.math_grade`);
- ``livecodebench``: the program of the last `````python`` block of the final channel (else its last plain
  ````` block, a ``python``/``py`` tag line dropped), else the same search over the whole text; the ground truth is
  the LiveCodeBench ``question_id``, and the program must pass every test of that problem, run as LiveCodeBench
  runs them (:mod:`mlharness.tasks.deepseek_r1.code_tests`) in the sandbox
  (:mod:`mlharness.tasks.deepseek_r1.sandbox`; 60 s per test as the official script). The tests come from the
  reference row's ``lcb_tests`` cell (JSON ``inputs``, ``outputs``, ``fn_name``) or from a JSON file mapping each
  question_id to that object (LiveCodeBench's release_v6 tests, which the official script loads from the hub).

The score weights each family by its repeats in the data set (aime25: 8, gpqa_diamond: 5, livecodebench_v6: 3,
others 1): ``exact_match`` = sum(correct / repeats) / sum(total / repeats) x 100. The text is what the script
prints to stdout, ending with ``'exact_match': X.XXX``, the line the submission checker reads.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult, accuracy_log_entries
from mlharness.tasks.deepseek_r1.graders import parse_integer  # AIME answers are parsed as for deepseek-r1
from mlharness.tasks.generative import guarded, resolve

DATASET_REPEATS = {"aime25": 8, "gpqa_diamond": 5, "livecodebench_v6": 3}
EVALUATOR_ORDER = ("gpqa", "mmlu_pro", "math500", "aime", "livecodebench", "mmlu")
CHOICES = {"gpqa": "D", "mmlu_pro": "J", "mmlu": "J"}
CODE_TIMEOUT = 60  # seconds per LiveCodeBench test, as the official script runs them
LCB_TESTS_FILE = "lcb_tests.json"  # read from the data set's folder when no other tests file is named


def _missing(value: Any) -> bool:
    try:
        import pandas as pd

        return bool(pd.isna(value)) if np.ndim(value) == 0 else False
    except (TypeError, ValueError):
        return False


def _clean(text: Any) -> str:
    return "" if text is None or _missing(text) else str(text).strip()


def final_section(text: str) -> str:
    """The Harmony final channel's content (stripped), or the whole text when there is none."""
    text = _clean(text)
    if not text:
        return ""
    m = re.search(r"<\|channel\|>final[^<]*<\|message\|>(.*?)(?:<\|return\|>|$)", text, re.DOTALL)
    return m.group(1).strip() if m else text


def parse_choice(text: Any, last: str) -> str | None:
    """The option letter (A..``last``) an answer gives."""
    text = _clean(text)
    if not text:
        return None
    section = re.sub(r"\*\*([^*]+)\*\*", r"\1", final_section(text))
    if section.startswith(("['", '["')) and section.endswith(("']", '"]')):
        section = section[2:-2].strip()
    section = section.replace(r"\n", "\n").replace(r"\'", "'")
    m = re.match(rf"^[^a-zA-Z]*([A-{last}])(?:[^a-zA-Z]|$)", section.strip(), re.IGNORECASE)
    if m:
        return m.group(1).upper()
    m = re.search(rf"\b(?:Answer|ANSWER)\s*[:.]?\s*([A-{last}])\b", section, re.IGNORECASE)
    if m:
        return m.group(1).upper()
    whole = text.replace(r"\n", "\n").replace(r"\'", "'")
    hits = list(re.finditer(rf"\b(?:ANSWER|FINAL\s*ANSWER)\b\s*[:=]?\s*(?:\(?\s*([A-{last}])\s*\)?)(?:\s*$|[^A-Za-z])",
                            whole, re.IGNORECASE))
    if hits:
        return hits[-1].group(1).upper()
    if last == "J":
        hits = list(re.finditer(rf"\b([A-{last}])\b", section, re.IGNORECASE))
        if hits:
            return hits[-1].group(1).upper()
    return None


def _last_block(pattern: str, text: str) -> str | None:
    hits = list(re.finditer(pattern, text, re.DOTALL))
    return hits[-1].group(1).strip() if hits else None


def _code_in(section: str) -> str | None:
    code = _last_block(r"```python(.*?)```", section)
    if code is not None:
        return code
    code = _last_block(r"```(.*?)```", section)
    return None if code is None else re.sub(r"^(?:python|py)\s*\n", "", code, flags=re.IGNORECASE)


def parse_code(text: Any) -> str | None:
    """A LiveCodeBench answer's program: the last fenced block of the Harmony final channel (a `````python`` one
    first), else of the whole text."""
    text = _clean(text)
    if not text:
        return None
    section = final_section(text)
    code = _code_in(section) if section != text else None
    return code if code is not None else _code_in(text)


def evaluator_key(family: str) -> str:
    for key in EVALUATOR_ORDER:
        if key in family:
            return key
    raise AccuracyError(f"gpt-oss: no evaluator for the data set '{family}' (known: {', '.join(EVALUATOR_ORDER)})")


def is_correct(output: str, truth: Any, family: str) -> bool:
    """Whether one decoded output answers right, as ``evaluate_single_entry`` decides (errors count as wrong).
    LiveCodeBench answers are run instead (:func:`score_log`)."""
    key = evaluator_key(family)
    if key == "livecodebench":
        raise AccuracyError("gpt-oss: livecodebench answers are graded by running their code against the "
                            "problem's tests (score_log), not by is_correct")
    if key == "math500":
        from mlharness.tasks.deepseek_r1.graders import math_correct, parse_boxed

        parsed: Any = parse_boxed(output)
    else:
        parsed = parse_choice(output, CHOICES[key]) if key in CHOICES else parse_integer(output)
    if parsed is None or _missing(truth):
        return False
    try:
        if key == "math500":
            return math_correct(parsed, truth)
        if key in CHOICES:
            if not parsed or not truth:
                return False
            options = "ABCDEFGHIJ"[: "ABCDEFGHIJ".index(CHOICES[key]) + 1]
            return parsed.upper() in options and parsed.upper() == truth.upper()
        return int(parsed) == int(truth)
    except (AttributeError, TypeError, ValueError):
        return False


def report(stats: dict[str, dict[str, int]]) -> tuple[str, float]:
    """The script's stdout for per-family (correct, total) counts, and the exact_match percentage."""
    total_correct = sum(s["correct"] for s in stats.values())
    total = sum(s["total"] for s in stats.values())
    overall = total_correct / total * 100 if total > 0 else 0.0
    score = sum(s["correct"] / DATASET_REPEATS.get(n, 1) for n, s in stats.items())
    best = sum(s["total"] / DATASET_REPEATS.get(n, 1) for n, s in stats.items())
    percent = score / best * 100 if best > 0 else 0.0
    bar, rule = "=" * 80, "-" * 80
    out = ["", bar, "MLPerf Accuracy Evaluation Results", bar, f"Total samples evaluated: {total}",
           f"Overall raw accuracy: {overall:.2f}% ({total_correct}/{total})", bar, "", "Per-Dataset Breakdown:", rule,
           f"{'Dataset':25s} {'Correct':>8s} {'Total':>8s} {'Repeats':>8s} {'Score':>10s} {'Accuracy':>10s}", rule]
    for name in sorted(stats):
        s, repeats = stats[name], DATASET_REPEATS.get(name, 1)
        if s["total"] > 0:
            out.append(f"{name:25s} {s['correct']:8d} {s['total']:8d} {repeats:8d} {s['correct'] / repeats:10.2f} "
                       f"{s['correct'] / s['total'] * 100:9.2f}%")
    names = sorted(stats)
    reps = [DATASET_REPEATS.get(n, 1) for n in names]
    correct = [stats[n]["correct"] for n in names]
    totals = [stats[n]["total"] for n in names]
    out += [bar, "", "Final Score Calculation:", rule,
            "Formula: " + " + ".join(f"{n}/{r}" for n, r in zip(names, reps, strict=True)),
            "Score:   = " + " + ".join(f"{c}/{r}" for c, r in zip(correct, reps, strict=True)),
            "         = " + " + ".join(f"{c / r:.2f}" for c, r in zip(correct, reps, strict=True)),
            f"         = {score:.2f}",
            "Max:     = " + " + ".join(f"{t}/{r}" for t, r in zip(totals, reps, strict=True)),
            f"         = {best:.2f}", "", f"FINAL SCORE: {percent:.2f}% ({score:.2f}/{best:.2f})", bar, "", "",
            "Printing for submission_checker:", "", f"'exact_match': {percent:.3f}"]
    return "\n".join(out) + "\n", percent


def _lcb_tests(frame: Any, row: int, extra: dict[str, Any], reference: Path | str,
               lcb_tests: Path | str | None) -> dict[str, Any]:
    from mlharness.tasks.deepseek_r1.dataset import lcb_tests_of

    try:
        tests = lcb_tests_of(frame, row, extra)
    except (DatasetError, ValueError) as e:
        raise AccuracyError(f"gpt_oss_exact_match: {reference}: {e}") from e
    if tests is None:
        source = f"the tests file {lcb_tests} has none for it" if lcb_tests else (
            "no tests file was given (--lcb-tests, accuracy option lcb_tests)")
        raise AccuracyError(f"gpt_oss_exact_match: {reference}: row {row} is a LiveCodeBench problem (question_id "
                            f"'{frame['ground_truth'].iloc[row]}') without tests: the row has no 'lcb_tests' cell "
                            f"and {source}; give a JSON file mapping each question_id to "
                            f"{{\"inputs\": [...], \"outputs\": [...], \"fn_name\": ...}} (LiveCodeBench "
                            f"release_v6)")
    return tests


def score_log(accuracy_log: Path | str, reference: Path | str, tokenizer_dir: Path | str,
              lcb_tests: Path | str | None = None, limits: Any = None) -> AccuracyResult:
    """The official figures of one mlperf_log_accuracy.json against a reference data file. LiveCodeBench tests
    come from the file's ``lcb_tests`` column, else from the JSON file ``lcb_tests`` (question_id -> tests);
    ``limits`` are the sandbox's (:class:`mlharness.tasks.deepseek_r1.sandbox.Limits`, 60 s per test)."""
    from mlharness.tasks.deepseek_r1.metric import load_lcb_tests
    from mlharness.tasks.deepseek_r1.sandbox import Limits, describe, run_programs
    from mlharness.tasks.gpt_oss.dataset import load_tokenizer, read_frame

    accuracy_log = Path(accuracy_log)
    try:
        frame = read_frame(reference)
        tokenizer = load_tokenizer(tokenizer_dir)
    except DatasetError as e:
        raise AccuracyError(f"gpt_oss_exact_match: {e}") from e
    for column in ("dataset", "ground_truth"):
        if column not in frame.columns:
            raise AccuracyError(f"gpt_oss_exact_match: {reference} has no '{column}' column")
    # the family name as the script takes it: str(...).lower(), unstripped
    families = [str(d).lower() if d is not None and not _missing(d) and d else None for d in frame["dataset"].tolist()]
    truths = frame["ground_truth"].tolist()
    extra: dict[str, Any] | None = None
    stats: dict[str, dict[str, int]] = defaultdict(lambda: {"correct": 0, "total": 0})
    jobs: list[tuple[str, dict[str, Any]]] = []
    job_rows: list[int] = []  # where each job's verdict goes in ``verdicts``
    verdicts: list[bool] = []  # per scored entry, in log order
    families_scored: list[str] = []
    skipped = tokens = 0
    for entry in accuracy_log_entries(accuracy_log):
        if entry.qsl_idx >= len(families):
            skipped += 1
            continue
        family = families[entry.qsl_idx]
        if family is None:
            raise AccuracyError(f"gpt_oss_exact_match: {reference}: row {entry.qsl_idx} has no data set name")
        data = entry.data(accuracy_log)
        if len(data) % 4:
            raise AccuracyError(f"gpt_oss_exact_match: {accuracy_log}: {entry.where}: {len(data)} bytes are not "
                                f"whole int32 token ids")
        ids = np.frombuffer(data, "<i4").tolist()
        tokens += len(ids)
        try:
            text = tokenizer.decode(ids, skip_special_tokens=False)
        except (OverflowError, TypeError, ValueError, IndexError) as e:
            raise AccuracyError(f"gpt_oss_exact_match: {accuracy_log}: {entry.where}: cannot decode its token ids "
                                f"with the tokenizer in {tokenizer_dir}: {e}") from e
        truth = truths[entry.qsl_idx]
        families_scored.append(family)
        if evaluator_key(family) != "livecodebench":
            verdicts.append(is_correct(text, truth, family))
            continue
        verdicts.append(False)
        if extra is None:
            extra = load_lcb_tests(lcb_tests, "gpt_oss_exact_match")
        tests = _lcb_tests(frame, entry.qsl_idx, extra, reference, lcb_tests)
        code = parse_code(text)
        if code and not _missing(truth) and truth:  # else wrong, as the official script decides
            jobs.append((code, tests))
            job_rows.append(len(verdicts) - 1)
    passed_jobs, isolation = run_programs(jobs, limits or Limits(timeout=CODE_TIMEOUT))
    for row, passed in zip(job_rows, passed_jobs, strict=True):
        verdicts[row] = passed
    for family, correct in zip(families_scored, verdicts, strict=True):
        stats[family]["total"] += 1
        stats[family]["correct"] += correct
    text, percent = report(dict(stats))
    samples = sum(s["total"] for s in stats.values())
    return AccuracyResult(text=text, value=round(percent, 3), name="exact_match",
                          details={"per_dataset": dict(stats), "skipped": skipped, "output_tokens": tokens,
                                   "tokens_per_sample": round(tokens / samples, 2) if samples else 0.0,
                                   "programs_run": len(jobs), "verdicts": verdicts, "reference": str(reference),
                                   "tokenizer": str(tokenizer_dir), "code_isolation": describe(isolation)})


class GptOssExactMatchMetric(AccuracyMetric):
    """exact_match of a gpt-oss-120b accuracy log. Options: ``reference_file`` (the data file whose rows the log's
    ``qsl_idx`` index; default ``acc/acc_eval_inputs.parquet``, relative to the dataset path), ``tokenizer`` (the
    folder whose tokenizer decodes the responses; relative to the dataset path, ``~`` expanded), ``lcb_tests``
    (JSON question_id -> LiveCodeBench tests, for a file without an ``lcb_tests`` column; default
    ``lcb_tests.json`` in the dataset folder when there is one) and ``code_timeout`` (seconds per test; 60)."""

    name = "gpt_oss_exact_match"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from mlharness.tasks.deepseek_r1.sandbox import limits_from_options
        from mlharness.tasks.gpt_oss.dataset import ACCURACY_FILE

        opts = ctx.options
        base = Path(ctx.dataset_path) if ctx.dataset_path is not None else None
        if base is not None and base.is_file():
            base = base.parent.parent if base.parent.name in ("acc", "perf") else base.parent
        reference = resolve(str(opts.get("reference_file", ACCURACY_FILE)), base)
        tokenizer = resolve(str(opts.get("tokenizer", "tokenizer")), base)
        lcb = resolve(str(opts["lcb_tests"]), base) if opts.get("lcb_tests") else None
        if lcb is None and base is not None and (base / LCB_TESTS_FILE).is_file():
            lcb = base / LCB_TESTS_FILE
        limits = limits_from_options(opts, CODE_TIMEOUT)
        return guarded(self.name, lambda: score_log(accuracy_log, reference, tokenizer, lcb, limits))
