"""qwen3.6-27b's test model's table: :func:`ensure_oracle_table`, the ``model.generator`` of
``qwen3.6-27b-oracle`` (framework ``session-oracle``).

The table maps each turn's conversation (:func:`mlharness.kinds.sessions.oracle.conversation_key`) to its right
answer: a BFCL prompt to its ground truth as a model would call the tools (``oracle_answer``), an agentic turn to
the assistant message the trace recorded. It is made from the synthetic folder in the cache (both sets), with the
very functions the dataset hook uses to make the sessions, so it follows any change to how they are built; the
BFCL score of the oracle is exactly 100 when the path from the data files to the accuracy log is right.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.tasks.generative import ensure_table
from mlharness.tasks.qwen36.synth import TRACE_FILE, ensure_synthetic_qwen36, synthetic_dir

TABLE_FORMAT = 1


def oracle_table(root: Path | str) -> dict[str, Any]:
    """``{"format": 1, "turns": {key: assistant message}}`` for the BFCL and agentic sessions under ``root``."""
    from mlharness.kinds.sessions.oracle import conversation_key, recorded_turns
    from mlharness.kinds.sessions.traces import load_trace
    from mlharness.tasks.bfcl_v4.dataset import data_folder, load_entries, to_session
    from mlharness.tasks.bfcl_v4.oracle import oracle_answer

    turns: dict[str, dict[str, Any]] = {}
    for entry in load_entries(data_folder(root)):  # every entry, not only the MLPerf selection: any subset works
        session = to_session(entry)
        first = session.turns[0]
        system = [] if session.system is None else [{"role": "system", "content": session.system}]
        key = conversation_key([*system, *first.messages], session.tools_for(first))
        turns.setdefault(key, oracle_answer(entry).message())
    for session in load_trace(Path(root) / TRACE_FILE, "agentic"):
        for key, message in recorded_turns(session):
            turns.setdefault(key, message)
    return {"format": TABLE_FORMAT, "dataset": str(root), "turns": turns}


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of qwen3.6-27b-oracle: the table of the synthetic folder (made when missing)."""
    root = ensure_synthetic_qwen36(synthetic_dir())
    return ensure_table(path, [root], lambda: oracle_table(root))
