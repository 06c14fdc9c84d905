"""What a replay measured: one record per turn and per session, written one JSON object a line to the run folder's
``sessions.jsonl`` (:func:`write_records`) and read back by the report (:func:`read_records`).

Times are seconds on the host's monotonic clock (``time.perf_counter``) except ``started_unix``; latencies are
derived from them. ``cached_tokens`` is the server's ``usage.prompt_tokens_details.cached_tokens`` (None where it
did not report one).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import iter_jsonl


@dataclass
class TurnRecord:
    session: str
    turn: int  # 0-based
    sent: float  # when the request was sent
    first: float | None  # first token / tool-call fragment
    done: float | None  # answer complete (None: failed)
    think_s: float  # the think time asked for before the send
    waited_s: float  # the think time observed (send minus the previous answer's end or the session's start)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    tool_calls: int = 0  # how many tool calls the answer made
    diverged: bool = False  # the answer did not call the tools the trace's next turn answers (recorded used instead)
    error: str | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first is None else self.first - self.sent

    @property
    def latency_s(self) -> float | None:
        return None if self.done is None else self.done - self.sent

    @property
    def tpot_s(self) -> float | None:
        """(done - first) / (completion_tokens - 1), None where the answer had fewer than two tokens."""
        if self.first is None or self.done is None or not self.completion_tokens or self.completion_tokens < 2:
            return None
        return (self.done - self.first) / (self.completion_tokens - 1)


@dataclass
class SessionRecord:
    session: str
    index: int  # the sample index (LoadGen's qsl_idx), -1 outside LoadGen
    started: float
    finished: float | None
    started_unix: float
    turns: list[TurnRecord] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.finished is not None

    @property
    def latency_s(self) -> float | None:
        return None if self.finished is None else self.finished - self.started


def write_records(path: Path, records: list[SessionRecord]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            row = asdict(rec)
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def read_records(path: Path) -> list[SessionRecord]:
    out = []
    for number, row in iter_jsonl(Path(path), "session records", error=DatasetError, allow_nan=True):
        try:
            fields: dict[str, Any] = dict(row)
            turns = [TurnRecord(**t) for t in fields.pop("turns")]
            out.append(SessionRecord(**fields, turns=turns))
        except (TypeError, ValueError, KeyError):
            raise DatasetError(f"session records {path}, line {number}: not a session record as mlharness writes "
                               "them (session, index, started, finished, started_unix, turns)") from None
    return out
