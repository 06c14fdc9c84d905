"""A synthetic gpt-oss-120b set in the official layout: ``acc/acc_eval_inputs.parquet``,
``perf/perf_eval_ref.parquet`` and ``acc/acc_eval_compliance_gpqa.parquet``, with the tokenizer that made
``tok_input`` in ``tokenizer/`` beside them.

Samples of the families ``eval_mlperf_accuracy.py`` scores by itself: ``gpqa_diamond`` (four options),
``mmlu_pro`` (ten options) and ``aime25`` (an integer in ``\\boxed{}``); math500 and livecodebench need the
reference's PRM800K grader and LiveCodeBench runner and are left out. Each prompt is a Harmony conversation
(:mod:`.harmony`; reasoning effort high for the accuracy and TEST07 files, low for the performance file) encoded
with the tiny tokenizer of llama3.1-8b's test models plus the Harmony special tokens. Each row also carries
``ref_output``: a complete Harmony answer (analysis, then the final channel with the right answer) whose length
in tokens averages about 1278, the reference mean TEST09 checks, so the oracle answering with it passes TEST07
and TEST09.
"""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.gpt_oss import harmony
from mlharness.tasks.gpt_oss.dataset import ACCURACY_FILE, COMPLIANCE_FILE, PERFORMANCE_FILE

log = logging.getLogger(__name__)

DEFAULT_COUNT = 24
TOKENIZER_DIR = "tokenizer"
MEAN_OUTPUT_TOKENS = 1278  # TEST09's reference mean (1278.20)
FAMILIES = ("gpqa_diamond", "aime25", "mmlu_pro")
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


def _question(family: str, rng: random.Random) -> tuple[str, str, str, str]:
    """(user text, developer instructions, ground truth, final-channel answer) of one sample."""
    a, b = rng.sample(WORDS, 2)
    if family == "aime25":
        x, y = rng.randint(10, 40), rng.randint(2, 24)
        answer = str(x * y % 1000)
        return (f"Find the remainder when the product of {x} and {y} is divided by 1000.", "Put the final answer "
                "within \\boxed{}.", answer, f"The answer is \\boxed{{{answer}}}.")
    options = 4 if family == "gpqa_diamond" else 10
    truth = LETTERS[rng.randrange(options)]
    choices = "\n".join(f"{LETTERS[i]}) the {rng.choice(WORDS)} of the {rng.choice(WORDS)}" for i in range(options))
    text = f"Which quantity determines how the {a} responds to the {b}?\n\n{choices}"
    instructions = f"Answer with the letter of the correct option (A-{LETTERS[options - 1]})."
    return text, instructions, truth, (truth if family == "gpqa_diamond" else f"Answer: {truth}")


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
    """``count`` rows in the official columns (plus ``question``, ``text_input`` and ``ref_output``)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        family = families[i % len(families)]
        question, instructions, truth, final = _question(family, rng)
        text = harmony.render_text(harmony.conversation(question, effort, instructions))
        # output lengths spread evenly around the reference mean, whatever the count
        target = MEAN_OUTPUT_TOKENS + (i * 37) % 201 - 100 if i % 2 == 0 else MEAN_OUTPUT_TOKENS - (
            (i - 1) * 37) % 201 + 100
        final_len = len(encode(tokenizer, harmony.answer_text("", final)))
        answer = harmony.answer_text(_analysis(tokenizer, rng, max(8, target - final_len)), final)
        rows.append({"dataset": family, "question": question, "ground_truth": truth, "text_input": text,
                     "tok_input": encode(tokenizer, text), "ref_output": answer})
    return rows


def write_synthetic_gpt_oss(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """Write the three data files and tokenizer/ into ``out``; the accuracy file last (it marks the set
    complete)."""
    import pandas as pd

    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic gpt-oss: count must be >= 1, got {count}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ACCURACY_FILE).unlink(missing_ok=True)
        tok_dir = out / TOKENIZER_DIR
        shutil.rmtree(tok_dir, ignore_errors=True)
        tokenizer = harmony_tokenizer()
        tokenizer.save_pretrained(str(tok_dir))
        files = ((PERFORMANCE_FILE, FAMILIES, harmony.PERFORMANCE_EFFORT, seed + 1),
                 (COMPLIANCE_FILE, ("gpqa_diamond",), harmony.ACCURACY_EFFORT, seed + 2),
                 (ACCURACY_FILE, FAMILIES, harmony.ACCURACY_EFFORT, seed))
        for name, families, effort, file_seed in files:
            path = out / name
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            pd.DataFrame(records(tokenizer, count, families, effort, file_seed)).to_parquet(tmp, index=False)
            tmp.replace(path)
    except OSError as e:
        raise DatasetError(f"synthetic gpt-oss: cannot write {out}: {e}") from e
    log.info("wrote %d synthetic gpt-oss samples per file to %s", count, out)
    return out


def synthetic_dir() -> Path:
    """Where the oracle and random manifests keep the synthetic set when no --dataset-path is given."""
    from mlharness.manifest.assets import cache_dir

    return cache_dir() / "gpt_oss_synth"


def ensure_synthetic_gpt_oss(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, written unless a complete one of ``count`` samples is there."""
    out = Path(out)
    try:
        import pyarrow.parquet as pq

        if (out / TOKENIZER_DIR / "tokenizer.json").is_file() and all(
                pq.read_metadata(out / name).num_rows == count
                for name in (ACCURACY_FILE, PERFORMANCE_FILE, COMPLIANCE_FILE)):
            return out
    except (OSError, ValueError, ImportError):
        pass
    return write_synthetic_gpt_oss(out, count, seed)
