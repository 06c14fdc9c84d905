"""The deepseek-r1 test models: the ``model.generator`` functions of the oracle and random manifests.

- :func:`ensure_oracle_table`: the token-oracle's table for the synthetic set, from each prompt (the sha256 of its
  int32 ids) to the token ids of its ``reference_answer`` (``ANSWER: C``, ``\\boxed{\\frac{1}{2}}``, a python
  block that passes the tests): exact_match is 100 exactly when the pipeline is right.
- :func:`ensure_random_deepseek`: a tiny random-weight ``DeepseekV3ForCausalLM`` (multi-head latent attention,
  one dense layer then a mixture-of-experts layer with a shared expert, as DeepSeek-R1 is built) with the tiny
  tokenizer, saved as a checkpoint folder ``from_pretrained`` loads offline.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.cnndm.models import prompt_key

log = logging.getLogger(__name__)

TABLE_FORMAT = 1
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
    return {"format": TABLE_FORMAT, "eos_token_id": eos[0], "dataset": str(dataset_pkl), "entries": entries}


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for p in paths:
        for f in sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]:
            digest.update(f.name.encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of deepseek-r1-oracle: the table of the synthetic set in the cache."""
    from mlharness.tasks.deepseek_r1.dataset import DATASET_FILE
    from mlharness.tasks.deepseek_r1.synth import TOKENIZER_DIR, ensure_synthetic_deepseek, synthetic_dir

    path = Path(path)
    root = ensure_synthetic_deepseek(synthetic_dir())
    source = _digest([root / DATASET_FILE, root / TOKENIZER_DIR])
    try:
        if json.loads(path.read_text()).get("source_sha256") == source:
            return path
    except (OSError, ValueError, AttributeError):
        pass
    table = oracle_table(root / DATASET_FILE, root / TOKENIZER_DIR)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        f.write(json.dumps({**table, "source_sha256": source}, sort_keys=True))
    Path(f.name).replace(path)
    return path


def build_random_deepseek(out: Path | str) -> Path:
    """Write the tiny random DeepseekV3 checkpoint (seeded: the same weights every time) into ``out``."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, GenerationConfig
    from transformers.utils import logging as hf_logging

    from mlharness.tasks.cnndm.tiny_tokenizer import eos_ids, train_tokenizer

    out = Path(out)
    tokenizer = train_tokenizer()
    eos = eos_ids(tokenizer)
    config = DeepseekV3Config(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=eos,
                              pad_token_id=tokenizer.pad_token_id, **RANDOM_CONFIG)
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar in a run's output
    try:
        model.save_pretrained(str(out), safe_serialization=True)
    finally:
        hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(str(out))
    (out / "mlharness.json").write_text(json.dumps({"doc": RANDOM_DOC}))
    return out


def ensure_random_deepseek(path: Path | str) -> Path:
    """``model.generator`` of deepseek-r1-random: the checkpoint folder at ``path``, built unless it is there."""
    path = Path(path)
    try:
        if json.loads((path / "mlharness.json").read_text()).get("doc") == RANDOM_DOC and (
                path / "model.safetensors").is_file():
            return path
    except (OSError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        build_random_deepseek(tmp)
        shutil.rmtree(path, ignore_errors=True)
        tmp.replace(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("wrote the tiny random DeepseekV3 to %s", path)
    return path
