"""The texts that ``exact_match`` and ``token_f1`` score: UTF-8 responses as written, or token ids decoded with
the tokenizer the manifest names (accuracy option ``tokenizer``). Token ids read as UTF-8 bytes would be scored
as text without a word (a token model's int32 ids are mostly NUL bytes), so ids without a tokenizer are refused.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, MLHarnessError
from mlharness.tasks.base import AccuracyContext, LogEntry

log = logging.getLogger(__name__)

TEXT_METRICS = ("exact_match", "token_f1")  # the generic metrics that score text
# response element types that hold token ids; text responses are bytes (uint8, int8, "bytes")
ID_TYPES = ("int16", "int32", "int64", "uint16", "uint32", "uint64")
TEXT_TYPES = ("uint8", "int8", "bytes")


def token_dtype(entries: list[LogEntry], ctx: AccuracyContext) -> tuple[str | None, str]:
    """(the integer type of the responses when they are token ids, else None; how that is known)."""
    option = str(ctx.options.get("dtype") or "")
    if option in ID_TYPES:
        return option, f"accuracy option dtype {option}"
    declared = str(getattr(ctx, "response_dtype", None) or "")
    if declared in ID_TYPES:
        return declared, f"response.element_type {declared}"
    if declared in TEXT_TYPES or option in TEXT_TYPES:  # a token stream answered as UTF-8 text (response.text):
        return None, ""  # LoadGen's entries carry token_count, yet the bytes are text, not int32 ids
    if any("token_count" in e.raw for e in entries):  # LoadGen logs token_count for token streams: int32 ids
        return "int32", "the log's entries carry token_count: a token model's int32 ids"
    return None, ""


def texts(metric: str, accuracy_log: Path, ctx: AccuracyContext, entries: list[LogEntry],
          responses: list[tuple[int, bytes]]) -> tuple[list[str], str | None]:
    """The response texts, and the tokenizer folder that decoded them (None: UTF-8 text as written)."""
    dtype, why = token_dtype(entries, ctx)
    if dtype is None:
        return [d.rstrip(b"\0").decode("utf-8", errors="replace") for _, d in responses], None
    if not ctx.options.get("tokenizer"):
        raise AccuracyError(
            f"{metric} scores text, but the responses in {accuracy_log} are token ids ({why}); read as UTF-8 they "
            "would be scored as garbage. Give the accuracy option 'tokenizer' (the folder of the tokenizer that "
            "made them, e.g. the model's checkpoint folder; relative to the dataset path) to decode them")
    from mlharness.tasks.generative import decode_responses, local_tokenizer, resolve

    folder = resolve(str(ctx.options["tokenizer"]), Path(ctx.dataset_path) if ctx.dataset_path else None)
    try:
        tokenizer = local_tokenizer(folder, "accuracy option 'tokenizer'")
    except MLHarnessError as e:
        raise AccuracyError(f"{metric}: {e}") from None
    ids: list[Any] = []
    for _, data in responses:
        if len(data) % np.dtype(dtype).itemsize:
            raise AccuracyError(f"{metric}: {accuracy_log}: a response of {len(data)} bytes is not whole {dtype} "
                                "token ids")
        ids.append(np.frombuffer(data, np.dtype(dtype)).tolist())
    decoded = decode_responses(tokenizer, ids, metric, accuracy_log, folder)
    log.warning("%s: the responses are token ids (%s), decoded with the tokenizer in %s", metric, why, folder)
    return decoded, str(folder)
