"""SQuAD v1.1 for MLPerf BERT: features exactly as the reference builds them, and their cache.

The reference (``language/bert`` in mlcommons/inference) reads ``dev-v1.1.json`` into one example per question,
splits each context on whitespace, WordPiece-tokenises every word with the uncased ``BertTokenizer``, and cuts
the context into doc spans of ``384 - len(query) - 3`` tokens with a stride of 128, each feature laid out as
``[CLS] query [SEP] span [SEP]``.  The sample index LoadGen uses is the feature index.  After the run,
``accuracy-squad.py`` turns the logged logits into answers (:mod:`.postprocess`) and the official v1.1 evaluation
(:mod:`.evaluate`) scores them; :class:`.metric.SquadMetric` chains the two.

Only the storage differs from the reference: the features are fixed-shape arrays (the WordPiece tokens are
recovered from the ids through the vocabulary, which is lossless because the tokenizer only emits vocabulary
entries) cached on disk under a key of the vocabulary, the data file and the parameters.
"""

from __future__ import annotations

import collections
import hashlib
import io
import logging
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import (
    DATA_FILE_LIMIT,
    check_regular_file,
    hash_file,
    load_npy,
    read_bytes_bounded,
    read_json,
)
from mlharness.tasks.files import atomic_write

log = logging.getLogger(__name__)

MAX_SEQ_LENGTH = 384
DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64
UNIQUE_ID_BASE = 1000000000
CACHE_FORMAT = 1  # bump when the cached arrays change meaning


@dataclass
class SquadExample:
    qas_id: str
    question_text: str
    doc_tokens: list[str]


def _is_squad_whitespace(c: str) -> bool:
    return c in " \t\r\n" or ord(c) == 0x202F


def read_squad_examples(path: Path | str) -> tuple[list[SquadExample], list[dict[str, Any]]]:
    """(one example per question, the json's ``data``): contexts split on whitespace as the reference does."""
    try:
        data = read_json(Path(path), "SQuAD file", DATA_FILE_LIMIT, error=DatasetError)["data"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DatasetError(f"cannot read SQuAD file {path}: {e}") from e
    examples = []
    try:
        for entry in data:
            for paragraph in entry["paragraphs"]:
                doc_tokens: list[str] = []
                prev_is_whitespace = True
                for c in paragraph["context"]:
                    if _is_squad_whitespace(c):
                        prev_is_whitespace = True
                    else:
                        if prev_is_whitespace:
                            doc_tokens.append(c)
                        else:
                            doc_tokens[-1] += c
                        prev_is_whitespace = False
                for qa in paragraph["qas"]:
                    examples.append(SquadExample(str(qa["id"]), qa["question"], doc_tokens))
    except (KeyError, TypeError) as e:
        raise DatasetError(f"{path} is not in the SQuAD v1.1 format: missing {e}") from e
    return examples, data


def load_tokenizer(vocab: Path | str, kind: str = "slow") -> Any:
    """The uncased BERT WordPiece tokenizer of ``vocab``.

    ``slow`` is the pure-Python ``BertTokenizer`` the reference ran (``BertTokenizerLegacy`` since transformers
    5); ``fast`` is the Rust one, equivalent on ordinary text.
    """
    import transformers

    if kind == "slow":
        cls = getattr(transformers, "BertTokenizerLegacy", None)
        if cls is None:  # transformers < 5: BertTokenizer is the Python one
            cls = transformers.BertTokenizer
        return cls(str(vocab), do_lower_case=True)
    if kind != "fast":
        raise DatasetError(f"unknown tokenizer kind '{kind}'; expected slow or fast")
    if hasattr(transformers, "BertTokenizerLegacy"):
        # transformers 5: BertTokenizer is the Rust one and takes the vocabulary itself (a vocab_file
        # argument would be ignored silently, leaving a 5-token vocabulary)
        table = {token: i for i, token in enumerate(read_vocab(vocab))}
        tokenizer = transformers.BertTokenizer(vocab=table, do_lower_case=True)
    else:
        tokenizer = transformers.BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    if tokenizer.vocab_size != len(set(read_vocab(vocab))):
        raise DatasetError(f"the fast tokenizer did not load {vocab} ({tokenizer.vocab_size} entries)")
    return tokenizer


def read_vocab(vocab: Path | str) -> list[str]:
    """id -> token, one token per line exactly as transformers' ``load_vocab`` reads it (readlines, so a
    token may hold characters that ``str.splitlines`` would break on)."""
    try:
        data = read_bytes_bounded(Path(vocab), "vocabulary", DATA_FILE_LIMIT, error=DatasetError)
        with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8") as f:  # the newline handling of open()
            return [line.rstrip("\n") for line in f.readlines()]
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read vocabulary {vocab}: {e}") from e


@dataclass
class Features:
    """All features as arrays; row f is feature f (= LoadGen sample index f)."""

    input_ids: np.ndarray  # int32 [F, L]
    input_mask: np.ndarray  # int8 [F, L]
    segment_ids: np.ndarray  # int8 [F, L]
    example_index: np.ndarray  # int32 [F]
    doc_span_index: np.ndarray  # int32 [F]
    unique_id: np.ndarray  # int64 [F]
    n_tokens: np.ndarray  # int32 [F]: len(tokens) before padding
    orig_index: np.ndarray  # int32 [F, L]: token_to_orig_map, -1 where the position is not a context token
    max_context: np.ndarray  # bool [F, L]: token_is_max_context

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def model_inputs(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """input_ids, input_mask, segment_ids of one feature as int64 [L] (the ONNX model's input type)."""
        return (self.input_ids[index].astype(np.int64), self.input_mask[index].astype(np.int64),
                self.segment_ids[index].astype(np.int64))

    def save(self, path: Path) -> None:
        atomic_write(path, lambda tmp: np.savez(tmp, **{fl.name: getattr(self, fl.name) for fl in fields(self)}),
                     suffix=".npz")

    @classmethod
    def load(cls, path: Path) -> Features:
        # the 10,833 features of SQuAD v1.1 at 384 tokens take about 45 MiB
        z = load_npy(path, "SQuAD feature cache", DATA_FILE_LIMIT, error=DatasetError)
        return cls(**{fl.name: z[fl.name] for fl in fields(cls)})


def check_is_max_context(doc_spans: list[tuple[int, int]], cur_span_index: int, position: int) -> bool:
    """Whether span ``cur_span_index`` gives ``position`` its most context: the reference's score is
    min(left, right context) + 0.01 * span length; the first best span wins ties."""
    best_score = None
    best_span_index = None
    for span_index, (start, length) in enumerate(doc_spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


def convert_examples_to_features(examples: list[SquadExample], tokenizer: Any,
                                 max_seq_length: int = MAX_SEQ_LENGTH, doc_stride: int = DOC_STRIDE,
                                 max_query_length: int = MAX_QUERY_LENGTH) -> Features:
    """The reference's ``convert_examples_to_features`` (evaluation mode), as arrays.

    Each word is tokenised on its own, as the reference does; results are memoised per distinct word (the
    tokenizer is deterministic), which is what makes the 10570 dev questions quick to convert.
    """
    pieces: dict[str, list[str]] = {}
    ids: dict[str, int] = {}

    def word_pieces(word: str) -> list[str]:
        if word not in pieces:
            pieces[word] = tokenizer.tokenize(word)
        return pieces[word]

    def token_id(token: str) -> int:
        if token not in ids:
            ids[token] = int(tokenizer.convert_tokens_to_ids(token))
        return ids[token]

    rows: dict[str, list[Any]] = collections.defaultdict(list)
    unique_id = UNIQUE_ID_BASE
    for example_index, example in enumerate(examples):
        query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
        tok_to_orig_index: list[int] = []
        all_doc_tokens: list[str] = []
        for i, word in enumerate(example.doc_tokens):
            for sub_token in word_pieces(word):
                tok_to_orig_index.append(i)
                all_doc_tokens.append(sub_token)

        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3  # [CLS], [SEP], [SEP]
        if max_tokens_for_doc < 1:
            raise DatasetError(f"max_seq_length {max_seq_length} leaves no room for the context of question "
                               f"{example.qas_id} ({len(query_tokens)} query tokens)")
        doc_spans: list[tuple[int, int]] = []
        start_offset = 0
        while start_offset < len(all_doc_tokens):
            length = min(len(all_doc_tokens) - start_offset, max_tokens_for_doc)
            doc_spans.append((start_offset, length))
            if start_offset + length == len(all_doc_tokens):
                break
            start_offset += min(length, doc_stride)

        for doc_span_index, (span_start, span_length) in enumerate(doc_spans):
            tokens = ["[CLS]", *query_tokens, "[SEP]"]
            segment_ids = [0] * len(tokens)
            orig_index = np.full(max_seq_length, -1, dtype=np.int32)
            max_context = np.zeros(max_seq_length, dtype=bool)
            for i in range(span_length):
                split_token_index = span_start + i
                orig_index[len(tokens)] = tok_to_orig_index[split_token_index]
                max_context[len(tokens)] = check_is_max_context(doc_spans, doc_span_index, split_token_index)
                tokens.append(all_doc_tokens[split_token_index])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)
            n = len(tokens)
            input_ids = np.zeros(max_seq_length, dtype=np.int32)
            input_ids[:n] = [token_id(t) for t in tokens]
            input_mask = np.zeros(max_seq_length, dtype=np.int8)
            input_mask[:n] = 1
            segments = np.zeros(max_seq_length, dtype=np.int8)
            segments[:n] = segment_ids
            for key, value in (("input_ids", input_ids), ("input_mask", input_mask), ("segment_ids", segments),
                               ("example_index", example_index), ("doc_span_index", doc_span_index),
                               ("unique_id", unique_id), ("n_tokens", n), ("orig_index", orig_index),
                               ("max_context", max_context)):
                rows[key].append(value)
            unique_id += 1

    def stack(key: str, dtype: Any, width: int | None = None) -> np.ndarray:
        if rows[key]:
            return np.asarray(rows[key], dtype=dtype)
        return np.zeros((0, width) if width else (0,), dtype=dtype)

    L = max_seq_length
    return Features(
        input_ids=stack("input_ids", np.int32, L), input_mask=stack("input_mask", np.int8, L),
        segment_ids=stack("segment_ids", np.int8, L), example_index=stack("example_index", np.int32),
        doc_span_index=stack("doc_span_index", np.int32), unique_id=stack("unique_id", np.int64),
        n_tokens=stack("n_tokens", np.int32), orig_index=stack("orig_index", np.int32, L),
        max_context=stack("max_context", bool, L),
    )


def _sha256(path: Path) -> str:
    return hash_file(path, "SQuAD input file", error=DatasetError)  # a FIFO or a device is refused, not read


def features_cache_key(val_data: Path, vocab: Path, tokenizer: str = "slow", max_seq_length: int = MAX_SEQ_LENGTH,
                       doc_stride: int = DOC_STRIDE, max_query_length: int = MAX_QUERY_LENGTH) -> str:
    """sha256 of everything the features depend on: both files' bytes, the parameters, the tokenizer code."""
    from importlib.metadata import version

    parts = [f"format={CACHE_FORMAT}", f"vocab={_sha256(vocab)}", f"data={_sha256(val_data)}",
             f"tokenizer={tokenizer}", f"transformers={version('transformers')}",
             f"max_seq_length={max_seq_length}", f"doc_stride={doc_stride}", f"max_query_length={max_query_length}"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def load_features(val_data: Path | str, vocab: Path | str, cache: Path | None = None, tokenizer: str = "slow",
                  examples: list[SquadExample] | None = None) -> Features:
    """The features of ``val_data``, from ``<cache>/squad_features/<key>.npz`` or converted (and cached)."""
    from mlharness.manifest.assets import cache_dir

    val_data, vocab = Path(val_data), Path(vocab)
    for what, p in (("SQuAD data file", val_data), ("vocabulary", vocab)):
        check_regular_file(p, what, error=DatasetError)
    path = (cache or cache_dir()) / "squad_features" / f"{features_cache_key(val_data, vocab, tokenizer)}.npz"
    if os.path.lexists(path):  # a FIFO or folder there is not a cache mlharness wrote: never replaced
        check_regular_file(path, "SQuAD feature cache", error=DatasetError)
        try:
            return Features.load(path)
        except (DatasetError, KeyError, TypeError, IndexError) as e:
            log.warning("rebuilding the unreadable feature cache %s: %s", path, e)
    if examples is None:
        examples, _ = read_squad_examples(val_data)
    log.info("converting %d SQuAD questions of %s to features", len(examples), val_data)
    features = convert_examples_to_features(examples, load_tokenizer(vocab, tokenizer))
    try:
        features.save(path)
    except OSError as e:
        log.warning("cannot cache the features at %s: %s", path, e)
    return features


# ---- accuracy log -> predictions -> official score -------------------------------------------------------------


def stack_logits(outputs: list[np.ndarray]) -> np.ndarray:
    """The response batch (n, L, 2) float32 from the model's outputs: separate start and end logits [n, L]
    (the MLPerf ONNX model), or one [n, L, 2] tensor."""
    if len(outputs) == 1 and outputs[0].ndim == 3 and outputs[0].shape[-1] == 2:
        return np.ascontiguousarray(outputs[0], dtype=np.float32)
    return np.stack((outputs[0], outputs[1]), axis=-1).astype(np.float32, copy=False)


def dataset_features(ctx: dict[str, Any]) -> Features:
    """Features for the dataset manifest's ``init``: from ``ctx["dataset_path"]`` (dev-v1.1.json and vocab.txt),
    or, for manifests whose ``attributes.synthetic_squad`` is set, from the synthetic set generated in the cache.
    Sets ``ctx["dataset_path"]`` for the accuracy metric."""
    attrs = ctx.get("dataset_attributes") or {}
    root = ctx.get("dataset_path")
    if not root:
        synthetic = (ctx.get("attributes") or {}).get("synthetic_squad")
        if not synthetic:
            raise DatasetError(
                "SQuAD needs --dataset-path: a folder with dev-v1.1.json "
                "(https://raw.githubusercontent.com/rajpurkar/SQuAD-explorer/master/dataset/dev-v1.1.json) and the "
                "BERT vocab.txt (https://zenodo.org/record/3733868/files/vocab.txt)")
        from mlharness.manifest.assets import cache_dir
        from mlharness.tasks.squad.synth import DEFAULT_COUNT, ensure_synthetic_squad

        count = synthetic if isinstance(synthetic, int) and not isinstance(synthetic, bool) else DEFAULT_COUNT
        root = ensure_synthetic_squad(cache_dir() / "squad_synth", count=count)
    root = Path(root)
    features = load_features(root / attrs.get("val_data", "dev-v1.1.json"), root / attrs.get("vocab", "vocab.txt"),
                             tokenizer=str(attrs.get("tokenizer", "slow")))
    if len(features) == 0:
        raise DatasetError(f"{root}: the SQuAD file yields no features")
    ctx["dataset_path"] = str(root)
    return features
