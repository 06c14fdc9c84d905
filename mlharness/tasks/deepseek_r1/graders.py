"""The per-dataset answer parsers and verdicts of the official deepseek-r1 ``eval_accuracy.py``.

- GPQA (options A-D) and MMLU-Pro (A-J): the last ``ANSWER: X`` / ``FINAL ANSWER: X`` (any case, optional colon or
  ``=``, optional parentheses); MMLU-Pro falls back on the last standalone letter A-J anywhere in the text (so a
  letter buried in reasoning counts). The letter must equal the ground truth.
- MATH500: the content of the last ``\\boxed{...}`` (braces matched), graded by :mod:`.math_grade` (PRM800K).
- AIME: the last ``\\boxed{<digits>}``, else the last ``Answer: <digits>``; an integer 0-999 equal to the ground
  truth's ``int``.
- LiveCodeBench: the first fenced `````python`` block, run against the problem's tests (:mod:`.code_tests`).

A dataset name picks its grader by substring, in the order gpqa, mmlu_pro, math500, aime, livecodebench
(``aime1983`` is AIME).
"""

from __future__ import annotations

import math
import re
from typing import Any

from mlharness.errors import AccuracyError

KINDS = ("gpqa", "mmlu_pro", "math500", "aime", "livecodebench")
OPTIONS = {"gpqa": "ABCD", "mmlu_pro": "ABCDEFGHIJ"}


def is_missing(value: Any) -> bool:
    """pandas' ``isna`` for the scalars a dataset cell holds: None and float NaN."""
    if value is None:
        return True
    try:
        return isinstance(value, float) and math.isnan(value)
    except TypeError:
        return False


def clean_text(value: Any) -> str:
    return "" if is_missing(value) else str(value).strip()


def kind_of(dataset_name: Any, where: str = "") -> str:
    """The grader a dataset name selects (the first of :data:`KINDS` it contains, lower-cased)."""
    if is_missing(dataset_name) or not dataset_name:
        raise AccuracyError(f"deepseek-r1: {where}the dataset name is empty")
    name = str(dataset_name).lower()
    for kind in KINDS:
        if kind in name:
            return kind
    raise AccuracyError(f"deepseek-r1: {where}no grader for dataset '{dataset_name}' (expected a name containing "
                        f"one of {', '.join(KINDS)})")


def parse_choice(text: Any, last_option: str) -> str | None:
    text = clean_text(text)
    if not text:
        return None
    if text.startswith(("['", '["')) and text.endswith(("']", '"]')):
        text = text[2:-2].strip()
    text = text.replace(r"\n", "\n").replace(r"\'", "'")
    pattern = (rf"\b(?:ANSWER|FINAL\s*ANSWER)\b\s*[:=]?\s*(?:\(?\s*([A-{last_option}])\s*\)?)"
               rf"(?:\s*$|[^A-Za-z])")
    found = list(re.finditer(pattern, text, re.IGNORECASE))
    if found:
        return found[-1].group(1).upper()
    if last_option == "J":  # MMLU-Pro: the last standalone letter
        letters = list(re.finditer(r"\b([A-J])\b", text, re.IGNORECASE))
        if letters:
            return letters[-1].group(1).upper()
    return None


def parse_boxed(text: Any) -> str | None:
    text = clean_text(text)
    if not text:
        return None
    start = text.rfind("\\boxed{")
    if start == -1:
        return None
    depth = 0
    for i in range(start + 7, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[start + 7:i].strip()
            depth -= 1
    return None


def parse_integer(text: Any) -> int | None:
    text = clean_text(text)
    if not text:
        return None
    boxed = list(re.finditer(r"\\boxed{\s*(\d+)\s*}", text))
    if boxed:
        digits = boxed[-1].group(1)
    else:
        stated = list(re.finditer(r"Answer:\s*(\d+)(?!\.)\b", text, re.IGNORECASE | re.MULTILINE))
        if not stated:
            return None
        digits = stated[-1].group(1)
    value = int(digits)
    return value if 0 <= value <= 999 else None


def parse_code(text: Any) -> str | None:
    text = clean_text(text)
    if not text:
        return None
    found = re.search(r"```python(.*?)```", text, re.DOTALL)
    return found.group(1).strip() if found else None


PARSERS = {"gpqa": lambda t: parse_choice(t, "D"), "mmlu_pro": lambda t: parse_choice(t, "J"),
           "math500": parse_boxed, "aime": parse_integer, "livecodebench": parse_code}


def choice_correct(parsed: str | None, truth: Any, options: str) -> bool:
    if not parsed or not truth:
        return False
    parsed, truth = parsed.upper(), str(truth).upper()
    return parsed in options and parsed == truth


def math_correct(parsed: str | None, truth: Any) -> bool:
    from mlharness.tasks.deepseek_r1.math_grade import grade_answer

    if not parsed or not truth:
        return False
    parsed = str(parsed).strip()
    return bool(parsed) and grade_answer(parsed, str(truth))


def integer_correct(parsed: int | None, truth: Any) -> bool:
    if parsed is None:
        return False
    try:
        return int(parsed) == int(truth)
    except (ValueError, TypeError):
        return False


def verdict(kind: str, parsed: Any, truth: Any) -> bool:
    """The official verdict of a parsed answer (LiveCodeBench is run by :mod:`.code_tests`, not here)."""
    if kind in OPTIONS:
        return choice_correct(parsed, truth, OPTIONS[kind])
    if kind == "math500":
        return math_correct(parsed, truth)
    if kind == "aime":
        return integer_correct(parsed, truth)
    raise AccuracyError(f"deepseek-r1: '{kind}' answers are graded by running them")
