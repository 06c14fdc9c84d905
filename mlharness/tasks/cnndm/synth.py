"""A synthetic llama3.1-8b dataset in exactly the official layout: ``cnn_eval.json`` and the edge set
``sample_cnn_eval_5000.json`` (the same records, shuffled with seed 42 and cut to 5000, as ``download_cnndm.py
--n-samples 5000`` makes it), with the tokenizer that made ``tok_input`` in ``tokenizer/`` beside them.

Articles and summaries come from :mod:`.text`; ``tok_input`` is the official prompt template filled with the
article and encoded by the tokenizer (the tiny local one by default, or any checkpoint folder's, e.g. the real
Llama-3.1-8B-Instruct's).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.cnndm.dataset import (
    DATASET_FILE,
    EDGE_COUNT,
    EDGE_DATASET_FILE,
    PROMPT_TEMPLATE,
    encode_prompt,
    load_tokenizer,
)
from mlharness.tasks.cnndm.text import article_and_highlights

log = logging.getLogger(__name__)

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

    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic CNN/DailyMail: count must be >= 1, got {count}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / DATASET_FILE).unlink(missing_ok=True)  # its presence marks the set complete
        tok_dir = out / TOKENIZER_DIR
        shutil.rmtree(tok_dir, ignore_errors=True)
        if tokenizer is None:
            save_tokenizer(tok_dir)
        else:
            load_tokenizer(tokenizer).save_pretrained(str(tok_dir))
        records = synthetic_records(load_tokenizer(tok_dir), count, seed)
        (out / EDGE_DATASET_FILE).write_text(json.dumps(edge_records(records), indent=1), encoding="utf-8")
        with tempfile.NamedTemporaryFile("w", dir=out, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump(records, f, indent=1)
        Path(f.name).replace(out / DATASET_FILE)
    except OSError as e:
        raise DatasetError(f"synthetic CNN/DailyMail: cannot write {out}: {e}") from e
    log.info("wrote %d synthetic CNN/DailyMail samples to %s", count, out)
    return out


def synthetic_dir() -> Path:
    """Where the oracle and random manifests keep the synthetic set when no --dataset-path is given."""
    from mlharness.manifest.assets import cache_dir

    return cache_dir() / "cnndm_synth"


def ensure_synthetic_cnndm(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, written unless a complete one of ``count`` samples is there."""
    out = Path(out)
    try:
        if (out / TOKENIZER_DIR / "tokenizer.json").is_file() and len(
                json.loads((out / DATASET_FILE).read_text(encoding="utf-8"))) == count:
            return out
    except (OSError, ValueError):
        pass
    return write_synthetic_cnndm(out, count, seed)
