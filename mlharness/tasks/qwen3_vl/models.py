"""The qwen3-vl-235b-a22b test model's table: :func:`ensure_oracle_table`, the ``model.generator`` of the
``-oracle`` manifests.

The ``token-oracle`` predictor looks a chat prompt up by its :attr:`ChatPrompt.key` (sha256 over roles, texts and
image bytes) in the table's ``chat`` map and answers with that text (its UTF-8 bytes streamed as the ids): here
each product's ground truth as the JSON object the model is asked for, so the category F1 is exactly 1.0 when the
pipeline (prompt built and checked at load, text answer logged as UTF-8, parsed as ProductMetadata) is right.
The keys are computed from the very prompts ``preprocess`` returns (``parse_chat`` of them), so the table follows
any change to the prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.tasks.generative import TABLE_FORMAT, ensure_table

EOS_TOKEN_ID = 0  # unused by text answers (a NUL byte never ends a JSON answer)


def oracle_table(root: Path | str) -> dict[str, Any]:
    """The oracle's table for a catalogue folder: ``{"chat": {prompt key: ground-truth JSON text}}``."""
    from mlharness.predictors.chat import parse_chat
    from mlharness.tasks.qwen3_vl.dataset import CatalogueData
    from mlharness.tasks.qwen3_vl.prompt import answer_text, messages

    data = CatalogueData(root)
    chat: dict[str, str] = {}
    for i in range(len(data)):
        row = data.row(i)
        chat.setdefault(parse_chat(messages(row, data.image_bytes(i)), i).key, answer_text(row))
    return {"format": TABLE_FORMAT, "eos_token_id": EOS_TOKEN_ID, "dataset": str(root), "entries": {},
            "chat": chat}


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of qwen3-vl-235b-a22b-oracle: one table for the synthetic catalogue and its synthetic
    Interactive subset in the cache (both made when missing)."""
    from mlharness.tasks.qwen3_vl.synth import ensure_synthetic_qwen3_vl, synthetic_dir

    roots = [ensure_synthetic_qwen3_vl(synthetic_dir()), ensure_synthetic_qwen3_vl(synthetic_dir(True),
                                                                                   interactive=True)]

    def build() -> dict[str, Any]:
        tables = [oracle_table(r) for r in roots]
        return {**tables[0], "dataset": [str(r) for r in roots],
                "chat": {k: v for t in tables for k, v in t["chat"].items()}}

    return ensure_table(path, roots, build)
