"""A synthetic llama2-70b dataset in exactly the official layout: the OpenOrca DataFrame pickle
(``open_orca_gpt4_tokenized_llama.sampled_24576.pkl``, the columns and dtypes processorca.py leaves) with the
tokenizer that made ``tok_input`` and ``tok_output`` in ``tokenizer/`` beside it.

Text comes from :mod:`.text`; the token columns are made as processorca.py makes them, by the tiny Llama 2 shaped
tokenizer (:mod:`.tokenizer`) by default or any checkpoint folder's (e.g. the real Llama-2-70b-chat-hf's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.generative import (
    ensure_synthetic,
    place_tokenizer,
    replace_file,
    synthetic_cache,
    write_synthetic,
)
from mlharness.tasks.openorca.dataset import (
    COLUMNS,
    DATASET_FILE,
    encode_output,
    encode_prompt,
    format_prompt,
    load_tokenizer,
    read_frame,
)
from mlharness.tasks.openorca.text import sample

DEFAULT_COUNT = 64
TOKENIZER_DIR = "tokenizer"
MAX_OUTPUT_TOKENS = 1000  # reference answers stay under max_new_tokens (1024), EOS included, so the oracle fits


def synthetic_frame(tokenizer: Any, count: int, seed: int = 0) -> Any:
    """A DataFrame of ``count`` samples with the official columns (strings and token lists as Python objects,
    lengths as int64), the token columns encoded by ``tokenizer``."""
    import pandas as pd

    from mlharness.tasks.openorca.tokenizer import response_init_id

    try:
        init_id = response_init_id(tokenizer)
    except ValueError as e:
        raise DatasetError(f"synthetic OpenOrca: {e}") from e
    rows: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    for i in range(count):
        s = sample(i, seed)
        text = format_prompt(s["system_prompt"], s["question"])
        tok_input = encode_prompt(tokenizer, text, init_id)
        tok_output = encode_output(tokenizer, s["output"])
        if len(tok_output) > MAX_OUTPUT_TOKENS:
            raise DatasetError(f"synthetic OpenOrca: answer {i} has {len(tok_output)} tokens, over "
                               f"{MAX_OUTPUT_TOKENS}")
        values = {**s, "input": text, "tok_input": tok_input, "tok_output": tok_output,
                  "tok_input_length": len(tok_input), "tok_output_length": len(tok_output)}
        for c in COLUMNS:
            rows[c].append(values[c])
    columns = {c: pd.Series(v, dtype="int64" if c.endswith("_length") else object) for c, v in rows.items()}
    return pd.DataFrame(columns)


def write_synthetic_openorca(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0,
                             tokenizer: Path | str | None = None) -> Path:
    """Write tokenizer/ and the dataset pickle into ``out``; the pickle last (its presence marks the set
    complete)."""
    from mlharness.tasks.openorca.tokenizer import save_tokenizer

    def write(out: Path) -> None:
        place_tokenizer(out / TOKENIZER_DIR, tokenizer, save_tokenizer, load_tokenizer)
        frame = synthetic_frame(load_tokenizer(out / TOKENIZER_DIR), count, seed)
        replace_file(out / DATASET_FILE, frame.to_pickle)

    return write_synthetic(out, count, "OpenOrca", DATASET_FILE, write)


def synthetic_dir() -> Path:
    """Where the oracle and random manifests keep the synthetic set when no --dataset-path is given."""
    return synthetic_cache("openorca_synth")


def ensure_synthetic_openorca(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, written unless a complete one of ``count`` samples is there."""
    return ensure_synthetic(out, lambda o: len(read_frame(o / DATASET_FILE)) == count,
                            lambda o: write_synthetic_openorca(o, count, seed))
