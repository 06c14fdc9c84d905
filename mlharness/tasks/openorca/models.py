"""The llama2-70b test models: the ``model.generator`` functions of the oracle and random manifests.

- :func:`ensure_oracle_table`: the token-oracle's "model", a table from each prompt of the synthetic set (keyed as
  :func:`mlharness.tasks.cnndm.models.prompt_key` keys it) to its reference ``tok_output`` without the BOS, so the
  oracle answers every prompt with the reference (then EOS, id 2): ROUGE 100 exactly, and ``tokens_per_sample``
  the reference's, when the pipeline is right.
- :func:`ensure_random_llama`: a tiny random-weight ``LlamaForCausalLM`` (the llama3.1-8b-random shape) with the
  tiny Llama 2 shaped tokenizer, saved as a checkpoint folder that ``from_pretrained`` loads offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.cnndm.models import RANDOM_CONFIG
from mlharness.tasks.generative import build_random_lm, ensure_checkpoint, ensure_table, prompt_key, table_of
from mlharness.tasks.openorca.dataset import EOS_TOKEN_ID, read_frame, token_list

RANDOM_DOC = "mlharness tiny random Llama 2 " + json.dumps(RANDOM_CONFIG, sort_keys=True)


def oracle_table(dataset_pickle: Path | str, eos_token_id: int = EOS_TOKEN_ID) -> dict[str, Any]:
    """The oracle's table for one OpenOrca pickle: prompt key -> the reference ``tok_output`` without its BOS."""
    frame = read_frame(dataset_pickle)
    if "tok_output" not in frame.columns:
        raise DatasetError(f"{dataset_pickle}: the DataFrame lacks the column tok_output the oracle answers with")
    entries: dict[str, list[int]] = {}
    for i, (prompt, answer) in enumerate(zip(frame["tok_input"], frame["tok_output"], strict=True)):
        ids = token_list(answer, f"{dataset_pickle}: row {i}: 'tok_output'")
        entries.setdefault(prompt_key(token_list(prompt, f"{dataset_pickle}: row {i}: 'tok_input'")), ids[1:])
    return table_of(entries, eos_token_id, dataset_pickle)


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of llama2-70b-99.9-oracle: the table of the synthetic set in the cache."""
    from mlharness.tasks.openorca.dataset import DATASET_FILE
    from mlharness.tasks.openorca.synth import ensure_synthetic_openorca, synthetic_dir

    root = ensure_synthetic_openorca(synthetic_dir())
    return ensure_table(path, [root / DATASET_FILE], lambda: oracle_table(root / DATASET_FILE))


def build_random_llama(out: Path | str) -> Path:
    """Write the tiny random Llama checkpoint (seeded: the same weights every time) into the folder ``out``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mlharness.tasks.openorca.tokenizer import train_tokenizer

    tokenizer = train_tokenizer()
    return build_random_lm(out, RANDOM_DOC, LlamaConfig, LlamaForCausalLM, tokenizer, tokenizer.eos_token_id,
                           RANDOM_CONFIG)


def ensure_random_llama(path: Path | str) -> Path:
    """``model.generator`` of llama2-70b-99.9-random: the checkpoint folder at ``path``, built unless it is
    there."""
    return ensure_checkpoint(path, RANDOM_DOC, build_random_llama, "the tiny random Llama 2")
