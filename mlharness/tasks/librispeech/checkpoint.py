"""The ``whisper-random`` test model: a tiny random-weight ``WhisperForConditionalGeneration`` saved as a checkpoint
folder that transformers loads offline (config, safetensors, generation config, feature extractor, tokenizer).

Its shapes are whisper-large-v3's where they meet the outside world: 128 mel bins of 30 s clips (3000 frames,
1500 encoder positions), 448 decoder positions and the 51866-token vocabulary, so the feature extractor, the
tokenizer and the prompt ``<|startoftranscript|><|en|><|transcribe|><|notimestamps|>`` are those of the real model;
inside it is 2 + 2 layers of width 64. The tokenizer is built from the byte-level BPE ranks that the
``openai-whisper`` package ships (``whisper/assets/multilingual.tiktoken``, read as data; the package is never
imported) and Whisper's special tokens, in the order and with the ids openai-whisper gives them.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import read_text_bounded

RANDOM_CONFIG: dict[str, Any] = {
    "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "num_mel_bins": 128,
    "max_source_positions": 1500, "max_target_positions": 448, "vocab_size": 51866,
}
RANDOM_DOC = "mlharness tiny random Whisper " + json.dumps(RANDOM_CONFIG, sort_keys=True)
ASSET = "whisper/assets/multilingual.tiktoken"
SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
NUM_LANGUAGES = 100  # large-v3 (Cantonese added): 51866 tokens in all


def asset_path() -> Path:
    """The BPE ranks file the installed openai-whisper distribution ships (found without importing it)."""
    try:
        path = Path(str(importlib.metadata.distribution("openai-whisper").locate_file(ASSET)))
    except importlib.metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise DatasetError(f"whisper-random's tokenizer is built from {ASSET} of the openai-whisper package: "
                           "pip install --no-deps openai-whisper==20250625 (see the Makefile)")
    return path


def ranks_size(path: Path | str) -> int:
    """How many BPE ranks a ``.tiktoken`` file (one ``base64(token bytes) rank`` per line) holds."""
    # multilingual.tiktoken holds 50,257 ranks in under 1 MiB
    text = read_text_bounded(Path(path), "BPE ranks file", 64 << 20, error=DatasetError)
    lines = [line for line in text.splitlines() if line.strip()]
    for n, line in enumerate(lines, 1):
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise DatasetError(f"{path}:{n}: not 'base64-token rank': {line[:60]!r}")
        base64.b64decode(parts[0])
    return len(lines)


def special_tokens() -> list[str]:
    """Whisper's special tokens after the BPE ranks, in id order (openai-whisper's ``get_encoding``)."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    languages = list(LANGUAGES)[:NUM_LANGUAGES]
    return ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{code}|>" for code in languages], "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>",
            *[f"<|{i * 0.02:.2f}|>" for i in range(1501)]]


def build_tokenizer(ranks_file: Path | str) -> Any:
    """A fast byte-level BPE tokenizer with the vocabulary and merges of ``ranks_file`` (transformers'
    tiktoken converter: every token of the vocabulary is matched whole first), Whisper's split pattern and its
    special tokens."""
    from tokenizers import Regex, decoders, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    size = ranks_size(ranks_file)
    tok = TikTokenConverter(vocab_file=str(ranks_file), pattern=SPLIT_PATTERN).tokenizer()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>", model_max_length=448)
    specials = special_tokens()
    fast.add_special_tokens({"additional_special_tokens": specials[1:]})
    for k, name in enumerate(specials):
        got = fast.convert_tokens_to_ids(name)
        if got != size + k:
            raise DatasetError(f"whisper tokenizer: special token {name} got id {got}, expected {size + k}")
    return fast


def generation_settings(tokenizer: Any) -> dict[str, Any]:
    """What transformers' Whisper generation reads from ``generation_config.json``: the prompt's token ids."""
    ids = tokenizer.convert_tokens_to_ids
    languages = [t for t in special_tokens()[2:2 + NUM_LANGUAGES]]
    return {"decoder_start_token_id": ids("<|startoftranscript|>"), "eos_token_id": ids("<|endoftext|>"),
            "pad_token_id": ids("<|endoftext|>"), "bos_token_id": ids("<|endoftext|>"),
            "no_timestamps_token_id": ids("<|notimestamps|>"), "is_multilingual": True,
            "lang_to_id": {t: ids(t) for t in languages},
            "task_to_id": {"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
            "prev_sot_token_id": ids("<|startofprev|>"), "begin_suppress_tokens": [220, 50257]}


def build_random_whisper(out: Path | str, seed: int = 0) -> Path:
    """Write the tiny random Whisper checkpoint folder to ``out``."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )
    from transformers.utils import logging as hf_logging

    out = Path(out)
    tokenizer = build_tokenizer(asset_path())
    gen = generation_settings(tokenizer)
    config = WhisperConfig(**RANDOM_CONFIG, decoder_start_token_id=gen["decoder_start_token_id"],
                           eos_token_id=gen["eos_token_id"], pad_token_id=gen["pad_token_id"],
                           bos_token_id=gen["bos_token_id"], begin_suppress_tokens=gen["begin_suppress_tokens"])
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(**gen)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar in the output of the run that generates it
    try:
        model.save_pretrained(out)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(out)
    WhisperFeatureExtractor(feature_size=RANDOM_CONFIG["num_mel_bins"]).save_pretrained(out)
    (out / "mlharness.json").write_text(json.dumps({"doc": RANDOM_DOC}))
    return out


def ensure_random_whisper(path: Path | str) -> Path:
    """``model.generator`` of whisper-random: the checkpoint folder at ``path`` (built when missing)."""
    from mlharness.tasks.generative import ensure_checkpoint

    return ensure_checkpoint(path, RANDOM_DOC, build_random_whisper, "the tiny random Whisper")


CHECKPOINT_ENV = "MLHARNESS_WHISPER_PATH"
DEFAULT_CHECKPOINT = "~/models/whisper-large-v3"
OFFICIAL_SOURCE = ("https://inference.mlcommons-storage.org/metadata/whisper-model.uri (the MLCommons R2 "
                   "downloader, speech2text/README.md) or https://huggingface.co/openai/whisper-large-v3")


def whisper_checkpoint(target: Path | str) -> Path:
    """``model.generator`` of the ``whisper`` manifest: nothing is generated; the checkpoint folder is
    ``$MLHARNESS_WHISPER_PATH`` or ~/models/whisper-large-v3, checked to hold a transformers Whisper checkpoint
    (config, weights, feature extractor, tokenizer). ``target`` (the cache path given to generators) is unused."""
    given = os.environ.get(CHECKPOINT_ENV, "").strip()
    folder = Path(given or DEFAULT_CHECKPOINT).expanduser()
    where = f"${CHECKPOINT_ENV}" if given else f"the default {DEFAULT_CHECKPOINT} (set ${CHECKPOINT_ENV} to another)"
    if not folder.is_dir():
        raise DatasetError(f"whisper: no checkpoint folder at {folder} ({where}); download whisper-large-v3 from "
                           f"{OFFICIAL_SOURCE}")
    missing = [name for name in ("config.json", "preprocessor_config.json") if not (folder / name).is_file()]
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        missing.append("model weights (*.safetensors)")
    if not (folder / "tokenizer.json").is_file() and not (folder / "vocab.json").is_file():
        missing.append("tokenizer (tokenizer.json or vocab.json)")
    if missing:
        raise DatasetError(f"whisper: the checkpoint folder {folder} ({where}) lacks {', '.join(missing)}")
    return folder.resolve()
