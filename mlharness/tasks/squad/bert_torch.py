"""The MLPerf reference's PyTorch BERT-Large for SQuAD, as a ``model.factory`` for the pytorch predictor.

The reference (mlcommons/inference ``language/bert/pytorch_SUT.py``) builds
``transformers.BertForQuestionAnswering(BertConfig(<bert_config.json>))`` and loads ``model.pytorch``
(zenodo 3733896) into it with a strict ``load_state_dict``. That file is the ``state_dict()`` written by
``bert_tf_to_pytorch.py`` under transformers 2.4 (the reference Dockerfile's pin), so its keys are
``bert.embeddings.*``, ``bert.encoder.layer.N.*``, ``bert.pooler.dense.*`` and ``qa_outputs.*``. Current
transformers name every module the same way but build the question-answering model without the pooler (it is
unused for QA) and keep ``position_ids``/``token_type_ids`` as non-persistent buffers, so a pre-load hook drops
``bert.pooler.*`` and those buffer keys when a checkpoint carries them; everything else must match exactly.

The module takes the manifest's three inputs positionally (``input_ids``, ``input_mask``, ``segment_ids``, int64
[N, 384]) and returns ``(start_logits, end_logits)``, each [N, 384], like the reference ONNX model.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from transformers import BertConfig, BertForQuestionAnswering

log = logging.getLogger(__name__)

# The reference's bert_config.json (language/bert): Google's BERT-Large uncased configuration, the shape of the
# MLPerf checkpoint (24 layers, hidden 1024, 16 heads, FFN 4096, WordPiece vocabulary of 30522).
BERT_LARGE_CONFIG: dict[str, Any] = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "max_position_embeddings": 512,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}

# Keys of the reference checkpoint that today's BertForQuestionAnswering has no place for (see the module doc).
_DROPPED_PREFIXES = ("bert.pooler.",)
_DROPPED_KEYS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")


def _drop_unused_keys(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: remove the pooler and buffer keys (in place: the dict is load's own copy)."""
    prefixes = tuple(prefix + p for p in _DROPPED_PREFIXES)
    keys = {prefix + k for k in _DROPPED_KEYS}
    dropped = [k for k in state_dict if k.startswith(prefixes) or k in keys]
    for key in dropped:
        del state_dict[key]
    if dropped:
        log.info("BERT checkpoint: ignoring %d key(s) the QA model does not use: %s", len(dropped), dropped)


def _config(config: dict[str, Any] | None, attn_implementation: str) -> BertConfig:
    values = {**BERT_LARGE_CONFIG, **(config or {})}
    return BertConfig(**values, attn_implementation=attn_implementation)


class BertSquad(BertForQuestionAnswering):
    """``BertForQuestionAnswering`` (same modules, same state-dict keys) called with the manifest's three
    positional tensors and answering a plain ``(start_logits, end_logits)`` tuple."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.register_load_state_dict_pre_hook(_drop_unused_keys)

    def forward(self, input_ids: torch.Tensor, input_mask: torch.Tensor,  # type: ignore[override]
                segment_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = super().forward(input_ids=input_ids, attention_mask=input_mask, token_type_ids=segment_ids,
                              return_dict=True)
        return out.start_logits, out.end_logits


def bert_squad(config: dict[str, Any] | None = None, attn_implementation: str = "sdpa") -> BertSquad:
    """``model.factory``: BERT-Large for SQuAD with random weights; the predictor loads ``weights_path`` into it.

    ``config`` (``framework.options.factory_args.config``) overrides entries of :data:`BERT_LARGE_CONFIG`.
    ``attn_implementation``: ``sdpa`` (torch's fused attention, the fast default) or ``eager`` (the explicit
    softmax(QK^T)V the reference ran); they agree to float rounding."""
    return BertSquad(_config(config, attn_implementation))
