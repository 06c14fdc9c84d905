"""What a session LoadGen sample answers, as bytes, and an accuracy log of such answers: the oracle's log (every
entry answered by its ground truth) scores the maximum, which the tests and the oracle benchmark rely on."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from mlharness.kinds.sessions.model import Answer
from mlharness.tasks.bfcl_v4.dataset import Entry
from mlharness.tasks.bfcl_v4.oracle import oracle_answer


def session_response(session_id: str, answers: Iterable[Answer]) -> bytes:
    """The response of one session sample: UTF-8 JSON ``{"session": id, "answers": [Answer.as_json(), ...]}``."""
    return json.dumps({"session": session_id, "answers": [a.as_json() for a in answers]}).encode("utf-8")


def write_accuracy_log(path: Path | str, responses: Iterable[tuple[int, bytes]]) -> Path:
    """An mlperf_log_accuracy.json of (qsl_idx, response bytes), as LoadGen writes it (data in upper-case hex)."""
    rows = [{"seq_id": i, "qsl_idx": idx, "data": data.hex().upper()} for i, (idx, data) in enumerate(responses)]
    Path(path).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return Path(path)


def oracle_log(path: Path | str, entries: list[Entry]) -> Path:
    """The accuracy log of the oracle: entry ``i`` (qsl_idx ``i``) answered by its ground truth."""
    return write_accuracy_log(path, ((i, session_response(e.id, [oracle_answer(e)])) for i, e in enumerate(entries)))
