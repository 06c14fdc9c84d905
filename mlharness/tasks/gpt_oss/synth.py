"""A synthetic gpt-oss-120b set in the official layout: ``acc/acc_eval_inputs.parquet``,
``perf/perf_eval_ref.parquet`` and ``acc/acc_eval_compliance_gpqa.parquet``, with the tokenizer that made
``tok_input`` in ``tokenizer/`` beside them.

Samples of every family ``eval_mlperf_accuracy.py`` scores: ``gpqa_diamond`` (four options), ``aime25`` (an
integer in ``\\boxed{}``), ``mmlu_pro`` (ten options), ``livecodebench_v6`` (stdin programs and LeetCode-style
methods; the ground truth is the question_id and the row's ``lcb_tests`` holds the problem's tests as JSON
``inputs``, ``outputs``, ``fn_name``) and ``math500`` (a LaTeX answer in ``\\boxed{}``); the problems of the last
two are those of the synthetic deepseek-r1 set. The performance file, whose answers are never graded, holds
the first three families only. Each prompt is a Harmony conversation
(:mod:`.harmony`; reasoning effort high for the accuracy and TEST07 files, low for the performance file) encoded
with the tiny tokenizer of llama3.1-8b's test models plus the Harmony special tokens. Each row also carries
``ref_output``: a complete Harmony answer (analysis, then the final channel with the right answer) whose length
in tokens averages about 1278, the reference mean TEST09 checks, so the oracle answering with it passes TEST07
and TEST09.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from mlharness.tasks.generative import (
    ensure_synthetic,
    replace_file,
    synthetic_cache,
    write_synthetic,
)
from mlharness.tasks.gpt_oss import harmony
from mlharness.tasks.gpt_oss.dataset import ACCURACY_FILE, COMPLIANCE_FILE, PERFORMANCE_FILE

DEFAULT_COUNT = 24
TOKENIZER_DIR = "tokenizer"
MEAN_OUTPUT_TOKENS = 1278  # TEST09's reference mean (1278.20)
FAMILIES = ("gpqa_diamond", "aime25", "mmlu_pro", "livecodebench_v6", "math500")
PERFORMANCE_FAMILIES = FAMILIES[:3]  # the performance file's answers are measured, never graded
LETTERS = "ABCDEFGHIJ"
WORDS = ("energy", "orbit", "enzyme", "lattice", "photon", "catalyst", "ratio", "vector", "isotope", "membrane",
         "prime", "polygon", "charge", "entropy", "reagent", "circuit", "genome", "density", "triangle", "spin")
STEPS = ("First, consider what the question asks about the {a} and the {b}.",
         "The {a} changes as the {b} grows, so compare the two cases carefully.",
         "Check each option against the constraint on the {a}.",
         "A quick estimate of the {b} rules out the extreme choices.",
         "Recompute the {a} step by step to be sure of the arithmetic.",
         "So far the reasoning about the {b} is consistent.")


def harmony_tokenizer() -> Any:
    """The tiny byte-level tokenizer of llama3.1-8b's test models with the Harmony special tokens added."""
    from mlharness.tasks.cnndm.tiny_tokenizer import train_tokenizer

    tokenizer = train_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": list(harmony.SPECIAL_TOKENS)})
    return tokenizer


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a text as the prompts and answers hold them: no BOS, special tokens as single ids."""
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]


def _question(family: str, rng: random.Random, index: int) -> tuple[str, str, str, str, dict[str, Any] | None]:
    """(user text, developer instructions, ground truth, final-channel answer, LiveCodeBench tests) of one
    sample."""
    if family in ("livecodebench_v6", "math500"):
        import numpy as np

        from mlharness.tasks.deepseek_r1.synth import code_question, math_question

        gen = np.random.default_rng(rng.randrange(1 << 32))
        if family == "math500":
            question, truth, answer = math_question(gen, index)
            return question, "Put the final answer within \\boxed{}.", truth, answer, None
        qid, statement, answer, tests = code_question(gen, index)
        return (statement, "Write a Python program that solves the problem, in one ```python block.", qid,
                answer, tests)
    a, b = rng.sample(WORDS, 2)
    if family == "aime25":
        x, y = rng.randint(10, 40), rng.randint(2, 24)
        answer = str(x * y % 1000)
        return (f"Find the remainder when the product of {x} and {y} is divided by 1000.", "Put the final answer "
                "within \\boxed{}.", answer, f"The answer is \\boxed{{{answer}}}.", None)
    options = 4 if family == "gpqa_diamond" else 10
    truth = LETTERS[rng.randrange(options)]
    choices = "\n".join(f"{LETTERS[i]}) the {rng.choice(WORDS)} of the {rng.choice(WORDS)}" for i in range(options))
    text = f"Which quantity determines how the {a} responds to the {b}?\n\n{choices}"
    instructions = f"Answer with the letter of the correct option (A-{LETTERS[options - 1]})."
    return text, instructions, truth, (truth if family == "gpqa_diamond" else f"Answer: {truth}"), None


def _analysis(tokenizer: Any, rng: random.Random, budget: int) -> str:
    """Reasoning text of about ``budget`` tokens."""
    sentences: list[str] = []
    used = 0
    while used < budget:
        a, b = rng.sample(WORDS, 2)
        sentence = rng.choice(STEPS).format(a=a, b=b)
        sentences.append(sentence)
        used += len(encode(tokenizer, " " + sentence))
    return " ".join(sentences)


def records(tokenizer: Any, count: int, families: tuple[str, ...], effort: str, seed: int) -> list[dict[str, Any]]:
    """``count`` rows in the official columns (plus ``question``, ``text_input``, ``ref_output`` and
    ``lcb_tests``)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        family = families[i % len(families)]
        question, instructions, truth, final, tests = _question(family, rng, i)
        text = harmony.render_text(harmony.conversation(question, effort, instructions))
        # output lengths spread evenly around the reference mean, whatever the count
        target = MEAN_OUTPUT_TOKENS + (i * 37) % 201 - 100 if i % 2 == 0 else MEAN_OUTPUT_TOKENS - (
            (i - 1) * 37) % 201 + 100
        final_len = len(encode(tokenizer, harmony.answer_text("", final)))
        answer = harmony.answer_text(_analysis(tokenizer, rng, max(8, target - final_len)), final)
        rows.append({"dataset": family, "question": question, "ground_truth": truth, "text_input": text,
                     "tok_input": encode(tokenizer, text), "ref_output": answer,
                     "lcb_tests": json.dumps(tests) if tests else None})
    return rows


def write_synthetic_gpt_oss(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """Write the three data files and tokenizer/ into ``out``; the accuracy file last (it marks the set
    complete)."""
    import pandas as pd

    def write(out: Path) -> None:
        tokenizer = harmony_tokenizer()
        tokenizer.save_pretrained(str(out / TOKENIZER_DIR))
        files = ((PERFORMANCE_FILE, PERFORMANCE_FAMILIES, harmony.PERFORMANCE_EFFORT, seed + 1),
                 (COMPLIANCE_FILE, ("gpqa_diamond",), harmony.ACCURACY_EFFORT, seed + 2),
                 (ACCURACY_FILE, FAMILIES, harmony.ACCURACY_EFFORT, seed))
        for name, families, effort, file_seed in files:
            frame = pd.DataFrame(records(tokenizer, count, families, effort, file_seed))
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            replace_file(out / name, lambda tmp, frame=frame: frame.to_parquet(tmp, index=False))

    return write_synthetic(out, count, "gpt-oss", ACCURACY_FILE, write)


def synthetic_dir() -> Path:
    """Where the oracle and random manifests keep the synthetic set when no --dataset-path is given."""
    return synthetic_cache("gpt_oss_synth")


def _complete(out: Path, count: int) -> bool:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return False
    return all(pq.read_metadata(out / name).num_rows == count and "lcb_tests" in pq.read_schema(out / name).names
               for name in (ACCURACY_FILE, PERFORMANCE_FILE, COMPLIANCE_FILE))


def ensure_synthetic_gpt_oss(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, written unless a complete one of ``count`` samples is there."""
    return ensure_synthetic(out, lambda o: _complete(o, count), lambda o: write_synthetic_gpt_oss(o, count, seed))
