"""A synthetic deepseek-r1 set in the official file format (see :mod:`.dataset`): locally generated questions of
each of the five kinds, in turn, with their ground truths, the prompt tokenized by the tiny tokenizer of the
llama3.1-8b test models (written to ``tokenizer/`` beside the file), the LiveCodeBench tests in ``lcb_tests`` and
the text a correct model would answer in ``reference_answer``.

- GPQA: arithmetic with four options; MMLU-Pro: ten options; both answered ``ANSWER: X``.
- MATH500: a fraction to reduce, a square root to simplify, a sum (answers such as ``\\frac{3}{4}``,
  ``2\\sqrt{3}``, ``17``), answered ``\\boxed{...}``.
- AIME: an integer 0-999, answered ``\\boxed{n}``.
- LiveCodeBench: stdin programs (read numbers, print a result) and LeetCode-style ``class Solution`` methods,
  each with public and private tests; answered with a fenced python block that passes them.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.tasks.deepseek_r1.dataset import DATASET_FILE
from mlharness.tasks.generative import (
    ensure_synthetic,
    replace_file,
    synthetic_cache,
    write_synthetic,
)

DEFAULT_COUNT = 20
TOKENIZER_DIR = "tokenizer"
KIND_NAMES = ("gpqa", "mmlu_pro", "math500", "aime1983", "livecodebench")
LETTERS = "ABCDEFGHIJ"
STDIN_TASKS = (  # (statement, reference solution, function of the numbers)
    ("Read integers a and b from one line and print a + b.", "a, b = map(int, input().split())\nprint(a + b)",
     lambda a, b: f"{a + b}\n"),
    ("Read integers a and b from one line and print the larger one, then their product on the next line.",
     "a, b = map(int, input().split())\nprint(max(a, b))\nprint(a * b)", lambda a, b: f"{max(a, b)}\n{a * b}\n"),
    ("Read integers a and b from one line and print a / b with three decimals.",
     "a, b = map(int, input().split())\nprint(f'{a / b:.3f}')", lambda a, b: f"{a / b:.3f}\n"),
)
FUNCTIONAL_TASKS = (  # (method, statement, reference solution, function of the list)
    ("sumEven", "Return the sum of the even numbers of nums.",
     "class Solution:\n    def sumEven(self, nums: List[int]) -> int:\n        return sum(x for x in nums if x % 2 == 0)",
     lambda xs: sum(x for x in xs if x % 2 == 0)),
    ("sortedDesc", "Return nums sorted in decreasing order.",
     "class Solution:\n    def sortedDesc(self, nums: List[int]) -> List[int]:\n        return sorted(nums, reverse=True)",
     lambda xs: sorted(xs, reverse=True)),
)


def _options(rng: np.random.Generator, right: int, n: int) -> tuple[list[int], int]:
    values = {right}
    while len(values) < n:
        values.add(right + int(rng.integers(-20, 21)))
    shuffled = [int(v) for v in rng.permutation(sorted(values))]
    return shuffled, shuffled.index(right)


def choice_question(rng: np.random.Generator, n: int) -> tuple[str, str, str]:
    a, b = int(rng.integers(10, 90)), int(rng.integers(10, 90))
    values, pos = _options(rng, a + b, n)
    lines = "\n".join(f"({LETTERS[i]}) {v}" for i, v in enumerate(values))
    letter = LETTERS[pos]
    return f"What is {a} + {b}?\n{lines}", letter, f"{a} plus {b} is {a + b}.\nANSWER: {letter}"


def math_question(rng: np.random.Generator, i: int) -> tuple[str, str, str]:
    form = i % 3
    if form == 0:
        num, den = int(rng.integers(1, 9)), int(rng.integers(2, 10))
        g = int(np.gcd(num, den))
        k = int(rng.integers(2, 6))
        question, answer = f"Reduce the fraction {num * k}/{den * k}.", f"\\frac{{{num // g}}}{{{den // g}}}"
        if den // g == 1:
            answer = str(num // g)
    elif form == 1:
        k = int(rng.integers(2, 6))
        question, answer = f"Simplify $\\sqrt{{{3 * k * k}}}$.", f"{k}\\sqrt{{3}}"
    else:
        a, b = int(rng.integers(1, 50)), int(rng.integers(1, 50))
        question, answer = f"Compute ${a} + {b}$.", str(a + b)
    return question, answer, f"Working it out step by step.\n\\boxed{{{answer}}}"


def aime_question(rng: np.random.Generator) -> tuple[str, str, str]:
    a, b = int(rng.integers(2, 30)), int(rng.integers(2, 30))
    value = (a * b) % 1000
    return (f"Find the remainder when {a} times {b} is divided by 1000.", str(value),
            f"The product is {a * b}.\n\\boxed{{{value}}}")


def code_question(rng: np.random.Generator, i: int) -> tuple[str, str, str, dict[str, Any]]:
    qid = f"synth{i:04d}"
    if i % 2 == 0:
        statement, solution, fn = STDIN_TASKS[(i // 2) % len(STDIN_TASKS)]
        pairs = [(int(rng.integers(1, 100)), int(rng.integers(1, 100))) for _ in range(3)]
        tests = {"inputs": [f"{a} {b}\n" for a, b in pairs], "outputs": [fn(a, b) for a, b in pairs],
                 "fn_name": None}
    else:
        name, statement, solution, fn = FUNCTIONAL_TASKS[(i // 2) % len(FUNCTIONAL_TASKS)]
        lists = [[int(x) for x in rng.integers(-20, 20, size=int(rng.integers(1, 6)))] for _ in range(3)]
        tests = {"inputs": [json.dumps(xs) for xs in lists], "outputs": [json.dumps(fn(xs)) for xs in lists],
                 "fn_name": name}
        statement += f"\nStarter code:\nclass Solution:\n    def {name}(self, nums: List[int]):"
    return qid, statement, f"Here is the program.\n```python\n{solution}\n```\n", tests


def synthetic_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        rng = np.random.default_rng((seed, i, 61))
        name = KIND_NAMES[i % len(KIND_NAMES)]
        tests = None
        if name == "gpqa":
            question, truth, answer = choice_question(rng, 4)
        elif name == "mmlu_pro":
            question, truth, answer = choice_question(rng, 10)
        elif name == "math500":
            question, truth, answer = math_question(rng, i // 5)
        elif name == "aime1983":
            question, truth, answer = aime_question(rng)
        else:
            truth, question, answer, tests = code_question(rng, i // 5)
        rows.append({"dataset": name, "question": question, "ground_truth": truth, "reference_answer": answer,
                     "lcb_tests": json.dumps(tests) if tests else None, "metric": f"{name}_em"})
    return rows


def write_synthetic_deepseek(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """Write the dataset pickle and ``tokenizer/`` into ``out``; the pickle last (its presence marks the set)."""
    import pandas as pd

    from mlharness.tasks.cnndm.dataset import load_tokenizer
    from mlharness.tasks.cnndm.tiny_tokenizer import save_tokenizer

    def write(out: Path) -> None:
        tokenizer = load_tokenizer(save_tokenizer(out / TOKENIZER_DIR))
        rows = synthetic_rows(count, seed)
        for row in rows:
            row["text_input"] = row["question"]
            row["tok_input"] = [int(t) for t in tokenizer.encode(row["question"])]
            row["tok_input_len"] = len(row["tok_input"])
        columns = ["dataset", "question", "text_input", "tok_input", "tok_input_len", "ground_truth", "metric",
                   "lcb_tests", "reference_answer"]
        frame = pd.DataFrame(rows, columns=columns)
        for column in columns:  # text as plain object columns, as pandas 2 (and the official file) store them
            if column != "tok_input_len":
                frame[column] = frame[column].astype(object)
        replace_file(out / DATASET_FILE, lambda tmp: tmp.write_bytes(pickle.dumps(frame)))

    return write_synthetic(out, count, "deepseek-r1", DATASET_FILE, write)


def synthetic_dir() -> Path:
    """Where the oracle and random manifests keep the synthetic set when no --dataset-path is given."""
    return synthetic_cache("deepseek_r1_synth")


def ensure_synthetic_deepseek(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, written unless a complete one of ``count`` samples is there."""
    from mlharness.tasks.deepseek_r1.dataset import read_frame

    return ensure_synthetic(out, lambda o: len(read_frame(o / DATASET_FILE)) == count,
                            lambda o: write_synthetic_deepseek(o, count, seed))
