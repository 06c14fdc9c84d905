"""qwen3.6-27b's synthetic data: one folder holding both of its data sets, in the layout ``--dataset-path`` takes.

- ``data/BFCL_v4_<subset>.json`` and ``data/possible_answer/`` (the bfcl-eval layout): the synthetic BFCL v4
  single-turn entries of :func:`mlharness.tasks.bfcl_v4.synth.write_synthetic_bfcl_v4`;
- ``agentic_coding_2.5h.jsonl``: a small trace in the MLCommons endpoints agentic format (rows of user, assistant
  and tool messages, tools, think times) from :func:`mlharness.kinds.sessions.synth.synthetic_agentic_trace`.

The same call writes the same bytes, so the oracle's table made from it (``models.py``) matches every run.
"""

from __future__ import annotations

from pathlib import Path

from mlharness.errors import DatasetError
from mlharness.tasks.generative import synthetic_cache

TRACE_FILE = "agentic_coding_2.5h.jsonl"  # the reference's file name (examples/11_Edge_Agentic_Example)
BFCL_FOLDER = "data"
AGENTIC_SESSIONS = 4  # a SingleStream run plays them over and over: a few short sessions keep it quick
AGENTIC_TURNS = 4


def synthetic_dir() -> Path:
    return synthetic_cache("qwen36")


def _complete(out: Path) -> bool:
    bfcl = out / BFCL_FOLDER
    return (out / TRACE_FILE).is_file() and any(bfcl.glob("BFCL_v4_*.json"))


def write_synthetic_qwen36(out: Path | str, count: int = AGENTIC_SESSIONS, seed: int = 0) -> Path:
    """Write both synthetic sets into ``out``: ``count`` agentic sessions, BFCL v4's default few entries per
    subset (the trace last: its presence marks the folder complete). The defaults write the cache's folder, whose
    sessions the oracle's table answers."""
    from mlharness.kinds.sessions.synth import synthetic_agentic_trace
    from mlharness.tasks.bfcl_v4.synth import write_synthetic_bfcl_v4

    if count < 1:
        raise DatasetError(f"synthetic qwen3.6-27b: count must be >= 1 agentic session, got {count}")
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / TRACE_FILE).unlink(missing_ok=True)
    except OSError as e:
        raise DatasetError(f"synthetic qwen3.6-27b: cannot write {out}: {e}") from e
    write_synthetic_bfcl_v4(out / BFCL_FOLDER, seed=seed)
    synthetic_agentic_trace(out / TRACE_FILE, sessions=count, turns=AGENTIC_TURNS, seed=seed)
    return out


def ensure_synthetic_qwen36(out: Path | str) -> Path:
    """The synthetic folder ``out``, written unless complete."""
    out = Path(out)
    return out if _complete(out) else write_synthetic_qwen36(out)
