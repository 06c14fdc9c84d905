"""The deepseek-r1 test models: the ``model.generator`` functions of the oracle and random manifests.

- :func:`ensure_oracle_table`: the token-oracle's table for the synthetic set, from each prompt (the sha256 of its
  int32 ids) to the token ids of its ``reference_answer`` (``ANSWER: C``, ``\\boxed{\\frac{1}{2}}``, a python
  block that passes the tests): exact_match is 100 exactly when the pipeline is right.
- :func:`ensure_random_deepseek`: a tiny random-weight ``DeepseekV3ForCausalLM`` (multi-head latent attention,
  one dense layer then a mixture-of-experts layer with a shared expert, as DeepSeek-R1 is built) with the tiny
  tokenizer, saved as a checkpoint folder ``from_pretrained`` loads offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.generative import build_random_lm, ensure_checkpoint, ensure_table, prompt_key, table_of

RANDOM_CONFIG: dict[str, Any] = {
    "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 2, "n_shared_experts": 1, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "kv_lora_rank": 32,
    "q_lora_rank": 48, "qk_rope_head_dim": 16, "v_head_dim": 32, "qk_nope_head_dim": 16,
    "max_position_embeddings": 4096, "tie_word_embeddings": False}
RANDOM_DOC = "mlharness tiny random DeepseekV3 " + json.dumps(RANDOM_CONFIG, sort_keys=True)


def oracle_table(dataset_pkl: Path | str, tokenizer_dir: Path | str) -> dict[str, Any]:
    from mlharness.tasks.cnndm.dataset import load_tokenizer
    from mlharness.tasks.cnndm.tiny_tokenizer import eos_ids
    from mlharness.tasks.deepseek_r1.dataset import read_frame

    frame = read_frame(dataset_pkl)
    if "reference_answer" not in frame.columns:
        raise DatasetError(f"{dataset_pkl}: no 'reference_answer' column (the oracle answers the synthetic set)")
    tokenizer = load_tokenizer(tokenizer_dir)
    entries: dict[str, list[int]] = {}
    for ids, answer in zip(frame["tok_input"], frame["reference_answer"], strict=True):
        entries.setdefault(prompt_key(list(ids)), [int(t) for t in tokenizer.encode(answer, add_special_tokens=False)])
    eos = eos_ids(tokenizer)
    return table_of(entries, eos[0], dataset_pkl)


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of deepseek-r1-oracle: the table of the synthetic set in the cache."""
    from mlharness.tasks.deepseek_r1.dataset import DATASET_FILE
    from mlharness.tasks.deepseek_r1.synth import TOKENIZER_DIR, ensure_synthetic_deepseek, synthetic_dir

    root = ensure_synthetic_deepseek(synthetic_dir())
    return ensure_table(path, [root / DATASET_FILE, root / TOKENIZER_DIR],
                        lambda: oracle_table(root / DATASET_FILE, root / TOKENIZER_DIR))


def build_random_deepseek(out: Path | str) -> Path:
    """Write the tiny random DeepseekV3 checkpoint (seeded: the same weights every time) into ``out``."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from mlharness.tasks.cnndm.tiny_tokenizer import eos_ids, train_tokenizer

    tokenizer = train_tokenizer()
    return build_random_lm(out, RANDOM_DOC, DeepseekV3Config, DeepseekV3ForCausalLM, tokenizer, eos_ids(tokenizer),
                           RANDOM_CONFIG)


def ensure_random_deepseek(path: Path | str) -> Path:
    """``model.generator`` of deepseek-r1-random: the checkpoint folder at ``path``, built unless it is there."""
    return ensure_checkpoint(path, RANDOM_DOC, build_random_deepseek, "the tiny random DeepseekV3")
