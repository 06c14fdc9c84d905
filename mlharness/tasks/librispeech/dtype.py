"""The width of the label indices in a whisper accuracy log, when ``mlharness accuracy librispeech`` is not told.

The bytes of a response do not say their width, and a wrong width still decodes: int64 indices read as int32 are
the labels with a 0 (a space) after each, so the WER comes out near 400 % instead of failing. So the width is,
in this order:

1. ``--dtype`` as given;
2. the fact the run recorded: ``response_element_type`` in the ``mlharness_run.json`` beside the log (the dtype
   the SUT wrote every response in);
3. inferred from the log: the widest of int64, int32, int16, int8 at which every response is whole label indices
   (0..41). A wider reading that is valid is the narrower one with every other label a space, which real
   transcripts never are over many words; with too few labels to tell, the command refuses and asks for
   ``--dtype``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlharness.errors import AccuracyError
from mlharness.fileguard import read_text_bounded
from mlharness.tasks.base import accuracy_log_entries
from mlharness.tasks.librispeech.dataset import LABELS
from mlharness.tasks.librispeech.metric import DTYPES

RUN_RECORD = "mlharness_run.json"  # what `mlharness run` writes beside mlperf_log_accuracy.json
RUN_RECORD_LIMIT = 64 << 20
# fewer labels than this (at the widest valid reading) cannot tell int64 from int32 whose every other label is a
# space: a real transcript of this many characters is never single letters between spaces
MIN_EVIDENCE = 16


def recorded_dtype(log: Path) -> str | None:
    """``response_element_type`` of the run record beside ``log``; None when there is no record."""
    record = Path(log).parent / RUN_RECORD
    if not record.exists():
        return None
    text = read_text_bounded(record, "run record", RUN_RECORD_LIMIT, error=AccuracyError)
    try:
        meta = json.loads(text)
    except ValueError as e:
        raise AccuracyError(f"run record {record} is not JSON ({e}); pass --dtype to score {log} without it") from e
    element_type = meta.get("response_element_type") if isinstance(meta, dict) else None
    if element_type is None:
        return None  # a record from before the field existed: the log decides
    if element_type not in DTYPES:
        raise AccuracyError(f"run record {record}: field 'response_element_type' is {element_type!r}; whisper label "
                            f"indices are one of {', '.join(DTYPES)} (pass --dtype to override)")
    return str(element_type)


def _valid(data: list[bytes], dtype: str) -> bool:
    size = np.dtype(DTYPES[dtype]).itemsize
    for d in data:
        if len(d) % size:
            return False
        values = np.frombuffer(d, DTYPES[dtype])
        if values.size and (values.min() < 0 or values.max() >= len(LABELS)):
            return False
    return True


def inferred_dtype(log: Path) -> str:
    """The widest width at which every response of ``log`` is label indices; refused when the log is too small
    to tell it from a narrower one, or when no width fits."""
    data = [e.data(log) for e in accuracy_log_entries(log)]
    valid = [d for d in DTYPES if _valid(data, d)]
    if not valid:
        raise AccuracyError(f"{log}: no width of {', '.join(DTYPES)} reads every response as whisper label indices "
                            f"(0..{len(LABELS) - 1}); is it a whisper accuracy log?")
    widest = max(valid, key=lambda d: np.dtype(DTYPES[d]).itemsize)
    labels = sum(len(d) for d in data) // np.dtype(DTYPES[widest]).itemsize
    if 0 < labels < MIN_EVIDENCE and len(valid) > 1:  # (no labels at all: every width reads the same)
        raise AccuracyError(f"{log}: cannot tell the width of its label indices from {labels} label(s) (they read "
                            f"as {' or '.join(sorted(valid, reverse=True))}) and no {RUN_RECORD} beside it records it;"
                            " pass --dtype (int64: the reference SUT and whisper manifests)")
    return widest


def resolve_dtype(log: Path, given: str | None) -> tuple[str, str]:
    """(the width to read ``log``'s label indices in, where it came from)."""
    if given:
        return given, "given by --dtype"
    recorded = recorded_dtype(log)
    if recorded:
        return recorded, f"the response element type recorded in {Path(log).parent / RUN_RECORD}"
    return inferred_dtype(log), "inferred from the log (no --dtype, no run record beside it)"
