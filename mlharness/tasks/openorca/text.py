"""Synthetic OpenOrca-style samples: a system prompt (or none), a question and a GPT-4-like answer per sample,
built from the news sentences of :mod:`mlharness.tasks.cnndm.text` (no download).

The four origins of the real set take turns (cot, flan, niv, t0); about a quarter of the samples have no system
prompt, so both Llama 2 prompt forms occur. Answers reuse sentences of their question, so a model that copies
scores part of the ROUGE, and carry what the sentence split must get right (abbreviations, decimals, quotes).
"""

from __future__ import annotations

import numpy as np

from mlharness.tasks.cnndm.text import article_and_highlights, sentence
from mlharness.tasks.openorca.dataset import ORIGINS

SYSTEM_PROMPTS = (
    "",
    "You are an AI assistant. You will be given a task. You must generate a detailed and long answer.",
    "You are a helpful assistant, who always provide explanation. Think like you are answering to a five year "
    "old.",
    "You are an AI assistant that helps people find information.",
    "You should describe the task and explain your answer. While answering a multiple choice question, first "
    "output the correct answer(s).",
)
INSTRUCTIONS = (
    "Summarize this article in a few sentences:",
    "Write a short summary of the following text.",
    "Read the passage and answer: what happened, and why?",
    "Given the news report below, state its main points.",
    "Answer the question based on the context. Question: who reported what?",
)
ANSWER_OPENERS = ("", "Sure! ", "Step 1: Read the text.\nStep 2: Find the main facts.\n", "The answer is: ",
                  "Based on the passage, ")


def _pick(rng: np.random.Generator, words: tuple[str, ...]) -> str:
    return words[int(rng.integers(len(words)))]


def sample(index: int, seed: int = 0) -> dict[str, str]:
    """The text fields of synthetic sample ``index`` (id, system_prompt, question, output, origin)."""
    rng = np.random.default_rng((seed, index, 70))
    article, summary = article_and_highlights(index, seed)
    origin = ORIGINS[index % len(ORIGINS)]
    question = f"{_pick(rng, INSTRUCTIONS)}\n\n{article}"
    extra = " ".join(sentence(rng) for _ in range(int(rng.integers(0, 3))))
    output = (_pick(rng, ANSWER_OPENERS) + summary + (" " + extra if extra else "")).strip()
    return {"id": f"{origin}.{int(rng.integers(1, 1_000_000))}", "system_prompt": _pick(rng, SYSTEM_PROMPTS),
            "question": question, "output": output, "origin": origin}


def corpus() -> list[str]:
    """Text the tiny Llama 2 tokenizer is trained on: the prompt frame, every fixed phrase and a spread of
    samples."""
    lines = ["[INST] <<SYS>>\n\n<</SYS>>\n\n [/INST]", *SYSTEM_PROMPTS, *INSTRUCTIONS, *ANSWER_OPENERS]
    for i in range(200):
        s = sample(i, seed=12345)
        lines.extend((s["question"], s["output"]))
    return lines
