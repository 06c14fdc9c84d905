"""A small byte-level BPE tokenizer shaped like Llama 3's, trained here with the ``tokenizers`` library.

Byte-level, so every text encodes and decodes back exactly; the Llama 3 special tokens (``<|begin_of_text|>`` is
the BOS added to every encoded text, ``<|eot_id|>`` and ``<|end_of_text|>`` end a generation). Training is
deterministic: the same corpus (:func:`mlharness.tasks.cnndm.text.corpus`) gives the same vocabulary, so the
synthetic set, the random Llama and the oracle all agree on the ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.tasks.cnndm.text import corpus

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
EOT = "<|eot_id|>"
SPECIAL_TOKENS = (BOS, EOS, "<|start_header_id|>", "<|end_header_id|>", EOT)
VOCAB_SIZE = 512


def train_tokenizer() -> Any:
    """The tiny tokenizer as a ``transformers`` fast tokenizer (BOS added on encode, EOS = ``<|eot_id|>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOT, pad_token=EOS,
                                   model_max_length=128000, padding_side="left", clean_up_tokenization_spaces=False)


def save_tokenizer(out: Path | str) -> Path:
    """Train the tiny tokenizer and write its files (tokenizer.json, tokenizer_config.json, ...) into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    train_tokenizer().save_pretrained(str(out))
    return out


def eos_ids(tokenizer: Any) -> list[int]:
    """The ids that end a generation: the tokenizer's EOS and, when it has them, Llama 3's end tokens."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    for token in (EOT, EOS, "<|eom_id|>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(tid)
    return ids
