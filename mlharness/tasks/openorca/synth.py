"""A synthetic llama2-70b dataset in exactly the official layout: the OpenOrca DataFrame pickle
(``open_orca_gpt4_tokenized_llama.sampled_24576.pkl``, the columns and dtypes processorca.py leaves) with the
tokenizer that made ``tok_input`` and ``tok_output`` in ``tokenizer/`` beside it.

Text comes from :mod:`.text`; the token columns are made as processorca.py makes them, by the tiny Llama 2 shaped
tokenizer (:mod:`.tokenizer`) by default or any checkpoint folder's (e.g. the real Llama-2-70b-chat-hf's).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
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

log = logging.getLogger(__name__)

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

    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic OpenOrca: count must be >= 1, got {count}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / DATASET_FILE).unlink(missing_ok=True)
        tok_dir = out / TOKENIZER_DIR
        shutil.rmtree(tok_dir, ignore_errors=True)
        if tokenizer is None:
            save_tokenizer(tok_dir)
        else:
            load_tokenizer(tokenizer).save_pretrained(str(tok_dir))
        frame = synthetic_frame(load_tokenizer(tok_dir), count, seed)
        with tempfile.NamedTemporaryFile(dir=out, suffix=".tmp", delete=False) as f:
            tmp = Path(f.name)
        frame.to_pickle(tmp)
        tmp.replace(out / DATASET_FILE)
    except OSError as e:
        raise DatasetError(f"synthetic OpenOrca: cannot write {out}: {e}") from e
    log.info("wrote %d synthetic OpenOrca samples to %s", count, out)
    return out


def synthetic_dir() -> Path:
    """Where the oracle and random manifests keep the synthetic set when no --dataset-path is given."""
    from mlharness.manifest.assets import cache_dir

    return cache_dir() / "openorca_synth"


def ensure_synthetic_openorca(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, written unless a complete one of ``count`` samples is there."""
    out = Path(out)
    try:
        if (out / TOKENIZER_DIR / "tokenizer.json").is_file() and len(read_frame(out / DATASET_FILE)) == count:
            return out
    except (OSError, DatasetError):
        pass
    return write_synthetic_openorca(out, count, seed)
