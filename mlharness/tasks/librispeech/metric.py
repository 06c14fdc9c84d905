"""Word error rate of a whisper accuracy log, as ``speech2text/accuracy_eval.py`` computes it.

Every entry of the log counts (the script does not skip repeated samples). A response is a sequence of label
indices (:data:`.dataset.LABELS`) turned back into text; the reference is the manifest's transcript with the
characters outside the labels dropped. Both go through Whisper's ``EnglishTextNormalizer`` (package
``openai-whisper``; ``whisper-normalizer``, a copy of the same code, where that is absent) and are split on white
space; each pair is aligned treating up to three words run together as one (``compute_wer_with_concatenation``)
and scored by the word-level Levenshtein distance of the aligned units over the reference's word count. The
errors and words are summed over the log: WER = errors / words, and the script prints::

    Word Error Rate: {wer * 100}%, accuracy={(1 - wer) * 100}%

Response widths: ``dtype`` int8, int16, int32 or int64 read 1, 2, 4 or 8 bytes per index. (The official script's
``--output_dtype int32`` reads Python's array code ``l``, 8 bytes on 64-bit Linux; its default, int64, is what the
reference's SUT writes.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError, MLHarnessError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult, accuracy_log_entries

DTYPES = {"int8": "<i1", "int16": "<i2", "int32": "<i4", "int64": "<i8"}


def normalizer() -> Any:
    """Whisper's English text normalizer."""
    try:
        from whisper.normalizers import EnglishTextNormalizer
    except ImportError:
        try:
            from whisper_normalizer.english import EnglishTextNormalizer
        except ImportError as e:
            raise AccuracyError("whisper WER needs openai-whisper (or whisper-normalizer): "
                                "pip install 'mlharness[speech]'") from e
    return EnglishTextNormalizer()


def levenshtein(a: list[str], b: list[str]) -> int:
    """Edit distance between two word lists (insertions, deletions and substitutions cost 1)."""
    if len(a) > len(b):
        a, b = b, a
    row = list(range(len(a) + 1))
    for i, y in enumerate(b, 1):
        prev, row = row, [i] + [0] * len(a)
        for j, x in enumerate(a, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (x != y))
    return row[-1]


def _joined_match(hyp: list[str], ref: list[str], i: int, j: int) -> tuple[int, int] | None:
    """How many reference and hypothesis words to take together when up to three words of one side, run
    together, equal the other side's single word (the reference side tried first at each length)."""
    for k in range(1, 4):
        if i + k <= len(ref) and "".join(ref[i:i + k]) == hyp[j]:
            return k, 1
        if j + k <= len(hyp) and "".join(hyp[j:j + k]) == ref[i]:
            return 1, k
    return None


def concatenation_errors(hyp: list[str], ref: list[str]) -> tuple[int, int]:
    """(errors, reference words) of one pair, words run together counted as a match."""
    ref_units: list[str] = []
    hyp_units: list[str] = []
    i = j = 0
    while i < len(ref) and j < len(hyp):
        take = (1, 1) if ref[i] == hyp[j] else (_joined_match(hyp, ref, i, j) or (1, 1))
        ref_units.append("".join(ref[i:i + take[0]]))
        hyp_units.append("".join(hyp[j:j + take[1]]))
        i, j = i + take[0], j + take[1]
    ref_units += ref[i:]
    hyp_units += hyp[j:]
    return levenshtein(ref_units, hyp_units), len(ref)


def word_error_rate(hypotheses: list[str], references: list[str]) -> tuple[float, int, int]:
    """(WER, errors, reference words) over pairs of texts, normalised as the official script does."""
    norm = normalizer()
    errors = words = 0
    for h, r in zip(hypotheses, references, strict=True):
        e, w = concatenation_errors(norm(h).split(), norm(r).split())
        errors += e
        words += w
    if words == 0:
        raise AccuracyError("whisper WER: the references of the scored samples hold no words")
    return errors / words, errors, words


def result_line(wer: float) -> str:
    """What accuracy_eval.py prints (Python's own float formatting)."""
    return f"Word Error Rate: {wer * 100}%, accuracy={(1 - wer) * 100}%\n"


def score_log(accuracy_log: Path | str, manifest: Path | str, dtype: str = "int32",
              data_dir: Path | str | None = None) -> AccuracyResult:
    """The WER of ``accuracy_log`` against the clips of ``manifest`` (dev-all-repack.json)."""
    from mlharness.tasks.librispeech.dataset import LibriSpeech, labels_to_text

    if dtype not in DTYPES:
        raise AccuracyError(f"whisper_wer: unsupported dtype '{dtype}'; expected one of {', '.join(DTYPES)}")
    accuracy_log = Path(accuracy_log)
    try:
        clips = LibriSpeech(manifest, data_dir)
    except DatasetError as e:
        raise AccuracyError(f"whisper_wer: {e}") from e
    hypotheses, references = [], []
    size = np.dtype(DTYPES[dtype]).itemsize
    for entry in accuracy_log_entries(accuracy_log):
        if not 0 <= entry.qsl_idx < len(clips):
            raise AccuracyError(f"whisper_wer: {accuracy_log}: {entry.where} is outside the {len(clips)} clips of "
                                f"{manifest}")
        data = entry.data(accuracy_log)
        if len(data) % size:
            raise AccuracyError(f"whisper_wer: {accuracy_log}: {entry.where}: {len(data)} bytes are not whole "
                                f"{dtype} label indices")
        try:
            hypotheses.append(labels_to_text(np.frombuffer(data, DTYPES[dtype]), f"{accuracy_log}: {entry.where}: "))
        except DatasetError as e:
            raise AccuracyError(f"whisper_wer: {e}") from e
        references.append(clips.reference(entry.qsl_idx))
    if not hypotheses:
        raise AccuracyError(f"whisper_wer: accuracy log {accuracy_log} has no entries; nothing to score")
    wer, errors, words = word_error_rate(hypotheses, references)
    return AccuracyResult(text=result_line(wer), value=(1 - wer) * 100, name="accuracy",
                          details={"wer": wer * 100, "errors": errors, "words": words, "samples": len(hypotheses),
                                   "dtype": dtype, "manifest": str(manifest)})


class WhisperWerMetric(AccuracyMetric):
    """100 - WER of a whisper accuracy log. Options: ``manifest_file`` (dev-all-repack.json, relative to the
    dataset path), ``dtype`` (the width of the label indices in the responses; default: the element type the
    manifest declares for its responses, else int32)."""

    name = "whisper_wer"

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        from mlharness.tasks.librispeech.dataset import MANIFEST_FILE

        base = Path(ctx.dataset_path) if ctx.dataset_path is not None else None
        if base is None:
            raise AccuracyError("whisper_wer needs the dataset path (the folder holding dev-all-repack.json)")
        manifest = base if base.is_file() else base / str(ctx.options.get("manifest_file", MANIFEST_FILE))
        try:
            dtype = ctx.options.get("dtype") or (ctx.response_dtype if ctx.response_dtype in DTYPES else "int32")
            return score_log(accuracy_log, manifest, str(dtype),
                             base.parent if base.is_file() else base)
        except MLHarnessError:
            raise
        except (OSError, ValueError) as e:
            raise AccuracyError(f"whisper_wer: {e}") from e
