"""The gpt-oss-120b test models: the ``model.generator`` functions of the oracle and random manifests.

- :func:`ensure_oracle_table`: the token-oracle's table from each prompt of the three synthetic data files (keyed
  by the sha256 of its int32 token ids, as the ``token-oracle`` predictor looks them up) to its ``ref_output``'s
  token ids, ``<|return|>`` left to the oracle as its EOS: exact_match is exactly its maximum when the pipeline
  (prompt ids in, int32 ids out, decode, parse the final channel) is right, and the outputs average about the
  length TEST09 expects.
- :func:`ensure_random_gpt_oss`: a tiny random-weight ``GptOssForCausalLM`` (2 layers, hidden 64, 4 experts, 2 per
  token; one sliding-window and one full-attention layer) and the synthetic set's tokenizer, saved as a checkpoint
  folder ``from_pretrained`` loads offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.generative import build_random_lm, ensure_checkpoint, ensure_table, prompt_key, table_of

RANDOM_CONFIG: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                                 "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 64,
                                 "max_position_embeddings": 4096, "tie_word_embeddings": False}
RANDOM_DOC = "mlharness tiny random GptOss " + json.dumps(RANDOM_CONFIG, sort_keys=True)


def oracle_table(root: Path | str) -> dict[str, Any]:
    """The oracle's table for a synthetic set's folder (its three data files and tokenizer/)."""
    from mlharness.tasks.gpt_oss.dataset import (
        ACCURACY_FILE,
        COMPLIANCE_FILE,
        PERFORMANCE_FILE,
        load_tokenizer,
        read_frame,
        token_column,
    )
    from mlharness.tasks.gpt_oss.harmony import RETURN
    from mlharness.tasks.gpt_oss.synth import TOKENIZER_DIR, encode

    root = Path(root)
    tokenizer = load_tokenizer(root / TOKENIZER_DIR)
    eos = tokenizer.convert_tokens_to_ids(RETURN)
    if not isinstance(eos, int) or eos == tokenizer.unk_token_id:
        raise DatasetError(f"the tokenizer in {root / TOKENIZER_DIR} has no {RETURN} token")
    entries: dict[str, list[int]] = {}
    for name in (ACCURACY_FILE, PERFORMANCE_FILE, COMPLIANCE_FILE):
        frame = read_frame(root / name)
        if "ref_output" not in frame.columns:
            raise DatasetError(f"{root / name} has no 'ref_output' column: the oracle answers synthetic sets only")
        for prompt, answer in zip(frame[token_column(frame, root / name)].tolist(), frame["ref_output"].tolist(),
                                  strict=True):
            ids = encode(tokenizer, answer)
            entries.setdefault(prompt_key(prompt), ids[:-1] if ids and ids[-1] == eos else ids)
    return table_of(entries, eos, root)


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of gpt-oss-120b-oracle: the table of the synthetic set in the cache."""
    from mlharness.tasks.gpt_oss.synth import ensure_synthetic_gpt_oss, synthetic_dir

    root = ensure_synthetic_gpt_oss(synthetic_dir())
    return ensure_table(path, [root], lambda: oracle_table(root))


def build_random_gpt_oss(out: Path | str) -> Path:
    """Write the tiny random GptOss checkpoint (seeded: the same weights every time) into the folder ``out``."""
    from transformers import GptOssConfig, GptOssForCausalLM

    from mlharness.tasks.gpt_oss.harmony import RETURN
    from mlharness.tasks.gpt_oss.synth import harmony_tokenizer

    tokenizer = harmony_tokenizer()
    eos = [tokenizer.convert_tokens_to_ids(t) for t in (RETURN, "<|call|>")]
    return build_random_lm(out, RANDOM_DOC, GptOssConfig, GptOssForCausalLM, tokenizer, eos, RANDOM_CONFIG,
                           bos=False)


def ensure_random_gpt_oss(path: Path | str) -> Path:
    """``model.generator`` of gpt-oss-120b-random: the checkpoint folder at ``path``, built unless it is there."""
    return ensure_checkpoint(path, RANDOM_DOC, build_random_gpt_oss, "the tiny random GptOss")
