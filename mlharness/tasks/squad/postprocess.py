"""The reference post-processing of SQuAD logits (``accuracy-squad.py``): LoadGen responses -> answer texts.

Each response is padded to 384 (start, end) logit pairs with -10000; for every question the 20 best starts and
the 20 best ends of each of its features are paired, spans that are not inside the context, whose start is not
in its max-context span, that end before they start or that are longer than 30 tokens are dropped, and the best
remaining span is mapped back to the original words and trimmed to the predicted characters (get_final_text).
"""

from __future__ import annotations

import collections
import unicodedata
from pathlib import Path

import numpy as np

from mlharness.errors import AccuracyError
from mlharness.tasks.base import accuracy_log_entries
from mlharness.tasks.squad.dataset import MAX_SEQ_LENGTH, Features, SquadExample

N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30
PAD_LOGIT = -10000.0  # what the reference pads shorter responses with
DTYPES = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "float16": np.float16,
          "float32": np.float32, "float64": np.float64}  # the reference's --output_dtype choices


def _is_whitespace(c: str) -> bool:
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_control(c: str) -> bool:
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def _is_punctuation(c: str) -> bool:
    cp = ord(c)
    return 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or \
        unicodedata.category(c).startswith("P")


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                             (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF),
                                             (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def basic_tokenize(text: str, do_lower_case: bool = True) -> list[str]:
    """BERT's original ``BasicTokenizer`` (what get_final_text uses): clean, space out CJK, lower case, strip
    accents, split off punctuation.  Unlike transformers' copy it does not NFC-normalise first, so character
    counts line up with the original text exactly as in the reference."""
    cleaned = []
    for c in text:
        if ord(c) == 0 or ord(c) == 0xFFFD or _is_control(c):
            continue
        if _is_whitespace(c):
            cleaned.append(" ")
        elif _is_cjk(ord(c)):
            cleaned.append(f" {c} ")
        else:
            cleaned.append(c)
    split: list[str] = []
    for token in "".join(cleaned).split():
        if do_lower_case:
            token = "".join(c for c in unicodedata.normalize("NFD", token.lower())
                            if unicodedata.category(c) != "Mn")
        word: list[str] = []
        for c in token:
            if _is_punctuation(c):
                if word:
                    split.append("".join(word))
                    word = []
                split.append(c)
            else:
                word.append(c)
        if word:
            split.append("".join(word))
    return " ".join(split).split()


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool = True) -> str:
    """Project the normalised prediction back onto the original text (e.g. ``Steve Smith's`` -> ``Steve
    Smith`` for the prediction ``steve smith``) by a character alignment; on any mismatch, the original text."""

    def strip_spaces(text: str) -> tuple[str, dict[int, int]]:
        ns_to_s = {}
        chars = []
        for i, c in enumerate(text):
            if c == " ":
                continue
            ns_to_s[len(chars)] = i
            chars.append(c)
        return "".join(chars), ns_to_s

    tok_text = " ".join(basic_tokenize(orig_text, do_lower_case))
    start_position = tok_text.find(pred_text)
    if start_position == -1:
        return orig_text
    end_position = start_position + len(pred_text) - 1
    orig_ns_text, orig_ns_to_s = strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s = strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        return orig_text
    tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}
    orig_start = orig_ns_to_s.get(tok_s_to_ns.get(start_position, -1))
    orig_end = orig_ns_to_s.get(tok_s_to_ns.get(end_position, -1))
    if orig_start is None or orig_end is None:
        return orig_text
    return orig_text[orig_start:orig_end + 1]


def _best_indexes(logits: np.ndarray, n_best_size: int) -> list[int]:
    """Indexes of the n largest logits, ties in index order (Python's stable sort, as the reference)."""
    return [int(i) for i in np.argsort(-logits, kind="stable")[:n_best_size]]


def predict_answers(examples: list[SquadExample], features: Features, vocab_tokens: list[str],
                    results: dict[int, np.ndarray], example_indexes: list[int] | None = None,
                    n_best_size: int = N_BEST_SIZE, max_answer_length: int = MAX_ANSWER_LENGTH,
                    do_lower_case: bool = True) -> dict[str, str]:
    """qas_id -> answer text for ``example_indexes`` (default: all), from ``results``: feature index ->
    float64 logits [L, 2].  A question none of whose features has a result, or with no valid span, gets
    ``"empty"`` as in the reference."""
    by_example: dict[int, list[int]] = collections.defaultdict(list)
    for f, e in enumerate(features.example_index.tolist()):
        by_example[e].append(f)
    predictions: dict[str, str] = collections.OrderedDict()
    for example_index in example_indexes if example_indexes is not None else range(len(examples)):
        example = examples[example_index]
        best: tuple[float, int, int, int] | None = None  # (score, feature, start, end)
        for f in by_example[example_index]:
            logits = results.get(f)
            if logits is None:
                continue
            # All n_best x n_best (start, end) pairs at once, in the reference's loop order (starts outer).
            starts = np.asarray(_best_indexes(logits[:, 0], n_best_size))[:, None]
            ends = np.asarray(_best_indexes(logits[:, 1], n_best_size))[None, :]
            n, orig, max_ctx = int(features.n_tokens[f]), features.orig_index[f], features.max_context[f]
            s_at, e_at = np.minimum(starts, len(orig) - 1), np.minimum(ends, len(orig) - 1)  # safe lookups
            s_ok = (starts < n) & (orig[s_at] >= 0) & max_ctx[s_at]
            e_ok = (ends < n) & (orig[e_at] >= 0)
            valid = s_ok & e_ok & (ends >= starts) & (ends - starts + 1 <= max_answer_length)
            if not valid.any():
                continue
            scores = np.where(valid, logits[starts, 0] + logits[ends, 1], -np.inf)
            k = int(np.argmax(scores))  # the first of equal scores, like the reference's stable sort
            score = float(scores.flat[k])
            if best is None or score > best[0]:
                best = (score, f, int(starts[k // scores.shape[1], 0]), int(ends[0, k % scores.shape[1]]))
        if best is None:
            predictions[example.qas_id] = "empty"
            continue
        # The reference builds an n-best list but answers with its first entry: the best-scoring valid span,
        # the earliest one among equal scores (its sort is stable).
        _, f, s, e = best
        tok_text = " ".join(vocab_tokens[i] for i in features.input_ids[f, s:e + 1].tolist())
        tok_text = " ".join(tok_text.replace(" ##", "").replace("##", "").strip().split())
        orig = features.orig_index[f]
        orig_text = " ".join(example.doc_tokens[int(orig[s]):int(orig[e]) + 1])
        predictions[example.qas_id] = get_final_text(tok_text, orig_text, do_lower_case)
    return predictions


def decode_accuracy_log(path: Path, n_features: int, dtype: str = "float32", transposed: bool = False,
                        max_seq_length: int = MAX_SEQ_LENGTH) -> tuple[dict[int, np.ndarray], int]:
    """(feature index -> float64 logits [max_seq_length, 2] padded with -10000, number of entries).

    Each response is (seq, 2) start/end pairs (``transposed``: all starts, then all ends).  A sample logged
    twice keeps its last response: the reference files results by unique id, later ones replacing earlier.
    """
    if dtype not in DTYPES:
        raise AccuracyError(f"squad: unsupported response dtype '{dtype}'; expected one of {', '.join(DTYPES)}")
    entries = accuracy_log_entries(path)
    results: dict[int, np.ndarray] = {}
    for entry in entries:
        qsl_idx = entry.qsl_idx
        if not 0 <= qsl_idx < n_features:
            raise AccuracyError(f"squad: {path}: {entry.where} is outside the {n_features} features of the dataset "
                                f"(was the log made with another dataset?)")
        data = entry.data(path)
        try:
            values = np.frombuffer(data, DTYPES[dtype])
            logits = values.reshape(2, -1).T if transposed else values.reshape(-1, 2)
        except ValueError as e:
            raise AccuracyError(f"squad: {path}: {entry.where}: {len(data)} response bytes are not (start, end) "
                                f"pairs of {dtype}: {e}") from e
        if logits.shape[0] > max_seq_length:
            raise AccuracyError(f"squad: {path}: {entry.where} has {logits.shape[0]} logit pairs, more than the "
                                f"sequence length {max_seq_length}")
        padded = np.full((max_seq_length, 2), PAD_LOGIT, dtype=np.float64)
        padded[:logits.shape[0]] = logits
        results[qsl_idx] = padded
    return results, len(entries)
