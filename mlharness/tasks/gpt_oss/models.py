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

import hashlib
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError

log = logging.getLogger(__name__)

TABLE_FORMAT = 1
RANDOM_CONFIG: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                                 "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 64,
                                 "max_position_embeddings": 4096, "tie_word_embeddings": False}
RANDOM_DOC = "mlharness tiny random GptOss " + json.dumps(RANDOM_CONFIG, sort_keys=True)


def oracle_table(root: Path | str) -> dict[str, Any]:
    """The oracle's table for a synthetic set's folder (its three data files and tokenizer/)."""
    from mlharness.tasks.cnndm.models import prompt_key
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
    return {"format": TABLE_FORMAT, "eos_token_id": eos, "dataset": str(root), "entries": entries}


def _source_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of gpt-oss-120b-oracle: the table of the synthetic set in the cache."""
    from mlharness.tasks.gpt_oss.synth import ensure_synthetic_gpt_oss, synthetic_dir

    path = Path(path)
    root = ensure_synthetic_gpt_oss(synthetic_dir())
    source = _source_digest(root)
    try:
        if json.loads(path.read_text()).get("source_sha256") == source:
            return path
    except (OSError, ValueError, AttributeError):
        pass
    data = json.dumps({**oracle_table(root), "source_sha256": source}, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        f.write(data)
    Path(f.name).replace(path)
    return path


def build_random_gpt_oss(out: Path | str) -> Path:
    """Write the tiny random GptOss checkpoint (seeded: the same weights every time) into the folder ``out``."""
    import torch
    from transformers import GenerationConfig, GptOssConfig, GptOssForCausalLM

    from mlharness.tasks.gpt_oss.harmony import RETURN
    from mlharness.tasks.gpt_oss.synth import harmony_tokenizer

    out = Path(out)
    tokenizer = harmony_tokenizer()
    eos = [tokenizer.convert_tokens_to_ids(t) for t in (RETURN, "<|call|>")]
    config = GptOssConfig(vocab_size=len(tokenizer), eos_token_id=eos, pad_token_id=tokenizer.pad_token_id,
                          bos_token_id=None, **RANDOM_CONFIG)
    torch.manual_seed(0)
    model = GptOssForCausalLM(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id,
                                               do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    (out / "mlharness.json").write_text(json.dumps({"doc": RANDOM_DOC}))
    return out


def _reusable(folder: Path) -> bool:
    try:
        return json.loads((folder / "mlharness.json").read_text()).get("doc") == RANDOM_DOC and all(
            (folder / name).is_file() for name in ("config.json", "model.safetensors", "tokenizer.json"))
    except (OSError, ValueError):
        return False


def ensure_random_gpt_oss(path: Path | str) -> Path:
    """``model.generator`` of gpt-oss-120b-random: the checkpoint folder at ``path``, built unless it is there."""
    path = Path(path)
    if _reusable(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        build_random_gpt_oss(tmp)
        shutil.rmtree(path, ignore_errors=True)
        tmp.replace(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("wrote the tiny random GptOss to %s", path)
    return path
