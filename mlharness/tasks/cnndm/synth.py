"""A synthetic llama3.1-8b dataset in exactly the official layout: ``cnn_eval.json`` and the edge set
``sample_cnn_eval_5000.json`` (the same records, shuffled with seed 42 and cut to 5000, as ``download_cnndm.py
--n-samples 5000`` makes it), with the tokenizer that made ``tok_input`` in ``tokenizer/`` beside them.

Articles and summaries come from :mod:`.text`; ``tok_input`` is the official prompt template filled with the
article and encoded by the tokenizer (the tiny local one by default, or any checkpoint folder's, e.g. the real
Llama-3.1-8B-Instruct's).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, check_regular_file, read_json
from mlharness.tasks.cnndm.dataset import (
    DATASET_FILE,
    EDGE_COUNT,
    EDGE_DATASET_FILE,
    PROMPT_TEMPLATE,
    encode_prompt,
    load_tokenizer,
)
from mlharness.tasks.cnndm.text import article_and_highlights
from mlharness.tasks.generative import (
    ensure_synthetic,
    place_tokenizer,
    replace_file,
    synthetic_cache,
    write_synthetic,
)

DEFAULT_COUNT = 64
TOKENIZER_DIR = "tokenizer"
MAX_OUTPUT_TOKENS = 120  # reference summaries stay under max_new_tokens (128), EOS included, so the oracle fits


def synthetic_records(tokenizer: Any, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` records with the official fields, ``tok_input`` encoded by ``tokenizer``."""
    records = []
    for i in range(count):
        article, summary = article_and_highlights(i, seed)
        n_out = len(tokenizer.encode(summary, add_special_tokens=False))
        if n_out > MAX_OUTPUT_TOKENS:
            raise DatasetError(f"synthetic CNN/DailyMail: summary {i} has {n_out} tokens, over {MAX_OUTPUT_TOKENS}")
        records.append({"instruction": {"llama": PROMPT_TEMPLATE}, "input": article,
                        "tok_input": encode_prompt(tokenizer, article), "output": summary})
    return records


def edge_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The edge subset: shuffled with seed 42, the first 5000 (all of them when fewer)."""
    shuffled = list(records)
    random.Random(42).shuffle(shuffled)
    return shuffled[:EDGE_COUNT]


def write_synthetic_cnndm(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0,
                          tokenizer: Path | str | None = None) -> Path:
    """Write cnn_eval.json, sample_cnn_eval_5000.json and tokenizer/ into ``out``; cnn_eval.json last."""
    from mlharness.tasks.cnndm.tiny_tokenizer import save_tokenizer

    def write(out: Path) -> None:
        place_tokenizer(out / TOKENIZER_DIR, tokenizer, save_tokenizer, load_tokenizer)
        records = synthetic_records(load_tokenizer(out / TOKENIZER_DIR), count, seed)
        (out / EDGE_DATASET_FILE).write_text(json.dumps(edge_records(records), indent=1), encoding="utf-8")
        replace_file(out / DATASET_FILE,
                     lambda tmp: tmp.write_text(json.dumps(records, indent=1), encoding="utf-8"))

    return write_synthetic(out, count, "CNN/DailyMail", DATASET_FILE, write)


def synthetic_dir() -> Path:
    """Where the oracle and random manifests keep the synthetic set when no --dataset-path is given."""
    return synthetic_cache("cnndm_synth")


def ensure_synthetic_cnndm(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, written unless a complete one of ``count`` samples is there."""
    def complete(o: Path) -> bool:
        path = o / DATASET_FILE
        if os.path.lexists(path):  # a FIFO or folder there is not a file mlharness wrote: refused, never replaced
            check_regular_file(path, "synthetic CNN/DailyMail file")
        # a malformed file (DatasetError) is written again, as a missing one
        return len(read_json(path, "synthetic CNN/DailyMail file", DATA_FILE_LIMIT, error=DatasetError)) == count

    return ensure_synthetic(out, complete, lambda o: write_synthetic_cnndm(o, count, seed))
