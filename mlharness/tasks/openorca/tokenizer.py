"""A small tokenizer shaped like Llama 2's, trained here with the ``tokenizers`` library (no download).

Llama 2's layout where it matters to the benchmark: ``<unk>`` 0, ``<s>`` 1 (the BOS added to every encoded text;
the text ``<s>`` at the start of a prompt is that token too, so a prompt starts with two), ``</s>`` 2 (EOS, the id
TEST06 checks), SentencePiece-style words marked with ``▁`` (a space before every word, ``▁`` alone is the
response-init token). The vocabulary is BPE over printable ASCII, newlines and the few non-ASCII quotes and dashes
processorca.py admits. Training is deterministic: the same corpus (:func:`mlharness.tasks.openorca.text.corpus`)
gives the same ids, so the synthetic set, the random model and the oracle agree.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
VOCAB_SIZE = 1024
ALPHABET = sorted(set(string.printable) - {" ", "\x0b", "\x0c", "\r"} | {"\u2581", "’", "–", "“", "”", "—"})


def train_tokenizer() -> Any:
    """The tiny tokenizer as a ``transformers`` fast tokenizer (BOS added on encode, EOS ``</s>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from mlharness.tasks.openorca.text import corpus

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[UNK, BOS, EOS], show_progress=False,
                                  initial_alphabet=ALPHABET)
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, tok.token_to_id(BOS))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, unk_token=UNK,
                                   pad_token=EOS, model_max_length=2048, padding_side="left",
                                   clean_up_tokenization_spaces=False)


def save_tokenizer(out: Path | str) -> Path:
    """Train the tiny tokenizer and write its files (tokenizer.json, tokenizer_config.json, ...) into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    train_tokenizer().save_pretrained(str(out))
    return out


def response_init_id(tokenizer: Any) -> int:
    """The id of ``▁`` (Llama 2's 29871), which processorca.py appends to every prompt."""
    tid = tokenizer.convert_tokens_to_ids("\u2581")
    if not isinstance(tid, int) or tid == tokenizer.unk_token_id:
        raise ValueError("the tokenizer has no '\u2581' token (the response-init token of Llama 2 prompts)")
    return tid
