"""A tiny random-weight Llama checkpoint with a word-level tokenizer (``<unk>``, ``<s>``, ``</s>``, then ``w3`` ...),
written into a folder: what the transformers tests load in place of a real checkpoint."""

from __future__ import annotations

from pathlib import Path


def write_tiny_llama(folder: Path, vocab_size: int, hidden: int = 32, layers: int = 2, heads: int = 4,
                     kv_heads: int = 2, positions: int = 128) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                            pad_token="</s>").save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=positions, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder
