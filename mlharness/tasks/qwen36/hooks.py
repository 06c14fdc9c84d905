"""What the qwen3.6-27b dataset manifests' hooks call: the sessions of a run.

qwen3.6-27b measures two things on two data sets, as its reference does (``online_edge_full_run.yaml`` of the
MLCommons endpoints): its accuracy is BFCL v4 single-turn tool calling (the MLPerf selection of about 995 prompts,
one one-turn session each), its performance the replay of the recorded agentic coding sessions
(``agentic_coding_2.5h.jsonl``, one session per conversation). So the data set follows the run's mode (``ctx
["mode"]``, as gpt-oss-120b reads its accuracy or performance file): an accuracy run gets the BFCL sessions, a
performance run the agentic ones. The choice is explicit where it is made: the dataset manifest's attribute
``sessions`` (``by_mode``, the default; ``bfcl``; ``agentic``), or the model manifest's attribute
``qwen36_sessions``, which wins; the dataset manifests ``qwen36_bfcl`` and ``qwen36_agentic`` fix it
(``--dataset qwen36_agentic`` replays the agentic sessions in accuracy mode too).

``--dataset-path`` names one folder for both: the BFCL v4 files (``BFCL_v4_<subset>.json`` and
``possible_answer/``, in it, its ``data/`` or its ``bfcl_v4/raw/``) and the trace ``agentic_coding_2.5h.jsonl``; or,
for the agentic sessions, the trace file itself. Without it, manifests with the attribute ``synthetic_qwen36`` use
the synthetic folder in the cache (``synth.py``); the others read BFCL v4 from the bfcl-eval environment
(``MLHARNESS_BFCL_PYTHON``) and need the trace named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.kinds.sessions.model import Session
from mlharness.tasks.qwen36.synth import TRACE_FILE, ensure_synthetic_qwen36, synthetic_dir

CHOICES = ("by_mode", "bfcl", "agentic")
SYNTHETIC_FLAG = "synthetic_qwen36"


class SessionSet:
    """The sessions of a run, one per sample (what ``preprocess`` returns), and where they came from."""

    def __init__(self, sessions: list[Session], kind: str, source: str):
        if not sessions:
            raise DatasetError(f"qwen3.6-27b: {source} holds no {kind} sessions")
        self.sessions, self.kind, self.source = sessions, kind, source

    def __len__(self) -> int:
        return len(self.sessions)

    def session(self, index: int) -> Session:
        return self.sessions[index]


def chosen_sessions(ctx: dict[str, Any]) -> str:
    """``bfcl`` or ``agentic``: the model manifest's ``qwen36_sessions``, else the dataset manifest's ``sessions``,
    else (``by_mode``) BFCL in accuracy mode and the agentic sessions in performance mode."""
    attrs, dattrs = ctx.get("attributes") or {}, ctx.get("dataset_attributes") or {}
    choice = attrs.get("qwen36_sessions") or dattrs.get("sessions") or "by_mode"
    if choice not in CHOICES:
        where = "attributes.qwen36_sessions" if attrs.get("qwen36_sessions") else "dataset attributes.sessions"
        raise DatasetError(f"qwen3.6-27b: {where} is {choice!r}; use one of {', '.join(CHOICES)}")
    if choice == "by_mode":
        return "bfcl" if ctx.get("mode") == "accuracy" else "agentic"
    return str(choice)


def bfcl_sessions(root: Path | str | None) -> tuple[list[Session], Path]:
    """The MLPerf selection of BFCL v4's single-turn entries under ``root`` (None: bfcl-eval's own data) as
    sessions, and the folder they came from."""
    from mlharness.tasks.bfcl_v4.dataset import data_folder, load_entries, mlperf_selection, to_session

    folder = data_folder(root)
    return [to_session(e) for e in mlperf_selection(load_entries(folder))], folder


def trace_file(root: Path | str) -> Path:
    root = Path(root).expanduser()
    path = root if root.is_file() else root / TRACE_FILE
    if not path.is_file():
        raise DatasetError(f"qwen3.6-27b: {path} not found: the performance sessions are the MLCommons endpoints "
                           f"trace {TRACE_FILE} (examples/11_Edge_Agentic_Example); pass --dataset-path with the "
                           "trace file, or a folder holding it")
    return path


def qwen36_dataset(ctx: dict[str, Any]) -> SessionSet:
    """For the dataset manifests' ``init``: the run's sessions (see the module doc). Sets ``ctx["dataset_path"]``
    to the BFCL folder (what the ``bfcl_v4`` metric reads) or the trace file."""
    kind = chosen_sessions(ctx)
    root = ctx.get("dataset_path")
    if not root and (ctx.get("attributes") or {}).get(SYNTHETIC_FLAG):
        root = ensure_synthetic_qwen36(synthetic_dir())
    if kind == "bfcl":
        sessions, folder = bfcl_sessions(root)
        ctx["dataset_path"] = str(folder)
        return SessionSet(sessions, kind, str(folder))
    if not root:
        raise DatasetError(f"qwen3.6-27b needs --dataset-path for its performance sessions: the trace {TRACE_FILE} "
                           "of the MLCommons endpoints (examples/11_Edge_Agentic_Example), or a folder holding it")
    from mlharness.kinds.sessions.traces import load_trace

    path = trace_file(root)
    ctx["dataset_path"] = str(path)
    return SessionSet(list(load_trace(path, "agentic")), kind, str(path))
