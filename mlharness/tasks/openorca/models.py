"""The llama2-70b test models: the ``model.generator`` functions of the oracle and random manifests.

- :func:`ensure_oracle_table`: the token-oracle's "model", a table from each prompt of the synthetic set (keyed as
  :func:`mlharness.tasks.cnndm.models.prompt_key` keys it) to its reference ``tok_output`` without the BOS, so the
  oracle answers every prompt with the reference (then EOS, id 2): ROUGE 100 exactly, and ``tokens_per_sample``
  the reference's, when the pipeline is right.
- :func:`ensure_random_llama`: a tiny random-weight ``LlamaForCausalLM`` (the llama3.1-8b-random shape) with the
  tiny Llama 2 shaped tokenizer, saved as a checkpoint folder that ``from_pretrained`` loads offline.
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
from mlharness.tasks.cnndm.models import RANDOM_CONFIG, TABLE_FORMAT, prompt_key
from mlharness.tasks.openorca.dataset import EOS_TOKEN_ID, read_frame, token_list

log = logging.getLogger(__name__)

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
    return {"format": TABLE_FORMAT, "eos_token_id": eos_token_id, "dataset": str(dataset_pickle),
            "entries": entries}


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of llama2-70b-99.9-oracle: the table of the synthetic set in the cache."""
    from mlharness.tasks.openorca.dataset import DATASET_FILE
    from mlharness.tasks.openorca.synth import ensure_synthetic_openorca, synthetic_dir

    path = Path(path)
    root = ensure_synthetic_openorca(synthetic_dir())
    source = hashlib.sha256((root / DATASET_FILE).read_bytes()).hexdigest()
    try:  # made from this very file: reused
        if json.loads(path.read_text()).get("source_sha256") == source:
            return path
    except (OSError, ValueError, AttributeError):
        pass
    data = json.dumps({**oracle_table(root / DATASET_FILE), "source_sha256": source}, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        f.write(data)
    Path(f.name).replace(path)
    return path


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

    from mlharness.tasks.openorca.tokenizer import train_tokenizer

    out = Path(out)
    tokenizer = train_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **RANDOM_CONFIG)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                                               eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    (out / "mlharness.json").write_text(json.dumps({"doc": RANDOM_DOC}))
    return out


def ensure_random_llama(path: Path | str) -> Path:
    """``model.generator`` of llama2-70b-99.9-random: the checkpoint folder at ``path``, built unless it is
    there."""
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
    log.info("wrote the tiny random Llama 2 to %s", path)
    return path
