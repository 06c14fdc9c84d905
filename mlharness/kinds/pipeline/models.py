"""The retrieval models of e2e-rag: the real checkpoints' download entries and tiny random ones built from configs.

The reference embeds with ``intfloat/e5-base-v2`` through LangChain's ``HuggingFaceEmbeddings`` (a
sentence-transformers model: mean pooling, ``normalize_embeddings=True``, and no ``"query: "``/``"passage: "``
prefixes: the reference passes the raw texts) and reranks with ``colbert-ir/colbertv2.0`` loaded as a plain
``AutoModel`` (``reranker_worker.py``: MaxSim over ``last_hidden_state``, no ColBERT projection, no
normalisation). The tiny stand-ins have those shapes: a 2-layer BERT of width 32 saved as a sentence-transformers
folder (Transformer, mean Pooling, Normalize) and a BERT of the same size saved for ``AutoModel``; both share a
WordPiece tokenizer made here from a small vocabulary, so nothing is downloaded.

Downloads: MLCommons publishes both checkpoints through its R2 downloader (``MLCOMMONS_ASSETS.md``:
``https://inference.mlcommons-storage.org/metadata/intfloat_e5-base-v2.uri`` and ``.../colbert-ir_colbertv2.0.uri``)
and ``download_models.sh`` fetches them from the Hugging Face hub; neither publishes a checksum, so the entries in
:data:`REAL_MODELS` carry none (a user's ``--model-path`` names the downloaded folder).
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

from mlharness.tasks.generative import ensure_checkpoint

REAL_MODELS = {
    "e5-base-v2": {"hub": "intfloat/e5-base-v2",
                   "url": "https://inference.mlcommons-storage.org/metadata/intfloat_e5-base-v2.uri",
                   "sha256": None, "dim": 768},
    "colbertv2.0": {"hub": "colbert-ir/colbertv2.0",
                    "url": "https://inference.mlcommons-storage.org/metadata/colbert-ir_colbertv2.0.uri",
                    "sha256": None, "dim": 768},
}

EMBEDDER_DOC = "tiny random e5-like embedder v3 (BERT 2x32, mean pooling, normalised)"
RERANKER_DOC = "tiny random ColBERT-like reranker v3 (BERT 2x32, token embeddings)"
MINILM_DOC = "tiny random MiniLM-like embedder v1 (BERT 1x24, CLS pooling, normalised)"
MINILM = {"hidden_size": 24, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 48,
          "max_position_embeddings": 256, "initializer_range": 1.0}
BERT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 512, "initializer_range": 1.0}


def _vocab() -> list[str]:
    """Special tokens, characters and their ``##`` continuations, digits, punctuation and a few common words: any
    text tokenizes (unknown characters to [UNK]), words split into characters where not listed."""
    words = ("the of and in to a is was for on as by with he she it from at his her that which this who "
             "film city river born year war team album song president university").split()
    chars = list(string.ascii_lowercase + string.digits)
    punct = list(string.punctuation)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars), *punct, *words]
    return list(dict.fromkeys(tokens))  # a token listed twice would shift every id after it


def _tokenizer(folder: Path) -> Any:
    from transformers import BertTokenizerFast

    # the vocabulary as a mapping: transformers 5's BertTokenizerFast ignores a vocab_file (every token [UNK])
    return BertTokenizerFast(vocab={w: i for i, w in enumerate(_vocab())}, do_lower_case=True, model_max_length=512)


def _bert(seed: int, folder: Path, shape: dict[str, Any] | None = None) -> Any:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    tok = _tokenizer(folder)
    model = BertModel(BertConfig(vocab_size=len(tok), **(shape or BERT))).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))
    return model


def _sentence_transformer(folder: Path, seed: int, shape: dict[str, Any], pooling: dict[str, bool],
                          max_seq_length: int, doc: str) -> None:
    """A random BERT as a sentence-transformers folder: the transformer, ``pooling``, then normalisation."""
    _bert(seed, folder, shape)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": shape["hidden_size"], **pooling}))
    (folder / "2_Normalize").mkdir()
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                                  "do_lower_case": False}))
    (folder / "mlharness.json").write_text(json.dumps({"doc": doc}))


def build_embedder(folder: Path) -> None:
    """The tiny e5-like embedder as a sentence-transformers folder (modules.json, Pooling, Normalize)."""
    _sentence_transformer(folder, 0, BERT, {"pooling_mode_mean_tokens": True}, 512, EMBEDDER_DOC)


def build_minilm(folder: Path) -> None:
    """A tiny all-MiniLM-like embedder for pipelines that are not MLPerf's (rag-minilm): a 1-layer BERT of width 24
    (not the e5 stand-in's 32) with CLS pooling (not mean), normalised, as a sentence-transformers folder."""
    _sentence_transformer(folder, 2, MINILM, {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False},
                          256, MINILM_DOC)


def build_reranker(folder: Path) -> None:
    """The tiny ColBERT-like reranker: a BERT whose ``last_hidden_state`` rows are the token embeddings."""
    _bert(1, folder)
    (folder / "mlharness.json").write_text(json.dumps({"doc": RERANKER_DOC}))


def ensure_random_embedder(target: Path | str) -> Path:
    """``model.generator`` of the random e2e-rag manifests' embedder: built at ``target`` unless it is there."""
    return ensure_checkpoint(target, EMBEDDER_DOC, build_embedder, "the tiny random e5-like embedder")


def ensure_random_minilm(target: Path | str) -> Path:
    """``model.generator`` of rag-minilm's embedder: built at ``target`` unless it is there."""
    return ensure_checkpoint(target, MINILM_DOC, build_minilm, "the tiny random MiniLM-like embedder")


def ensure_random_reranker(target: Path | str) -> Path:
    """``model.generator`` of the random e2e-rag manifests' reranker: built at ``target`` unless it is there."""
    return ensure_checkpoint(target, RERANKER_DOC, build_reranker, "the tiny random ColBERT-like reranker")
