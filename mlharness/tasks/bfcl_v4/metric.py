"""BFCL v4 single-turn accuracy (qwen3.6-27b) exactly as the MLCommons endpoints reference's ``BFCLv4Scorer``
computes it, with bfcl-eval's own AST checker run in its own environment.

Each accuracy-log entry's ``data`` is the UTF-8 JSON ``{"session": <entry id>, "answers": [{"content",
"tool_calls": [{"id", "name", "arguments"}]}]}``; the session id names the entry (a repeated one counts once, the
first, as the reference drops duplicates) and the last answer is scored:

- irrelevance / live_irrelevance (hallucination): right when the answer made no tool call;
- every other subset: the answer read as calls the reference's way (``extract.py``), then bfcl-eval's
  ``ast_checker`` against the possible answers, in a subprocess of ``MLHARNESS_BFCL_PYTHON`` (``checker.py``);
  an entry without possible answers is right when the answer made no call.

The figures are the reference's breakdown: ``overall_accuracy`` (the mean over every scored entry, percent, two
decimals: the figure accuracy.txt states as ``mAP=`` for the submission checker, whose target for qwen3.6-27b is
0.99 x 86.23), ``normalized_single_turn_score`` (the mean of the three categories), ``category_scores`` (non_live:
the simple_* subsets averaged as one, then the mean with the others; live: weighted by entries; hallucination: the
plain mean), ``subset_scores``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError
from mlharness.fileguard import read_json
from mlharness.tasks.base import (
    AccuracyContext,
    AccuracyMetric,
    AccuracyResult,
    accuracy_log_entries,
    subset_line,
)
from mlharness.tasks.bfcl_v4.dataset import (
    CATEGORY_MAP,
    SINGLE_TURN_SUBSETS,
    Entry,
    load_entries,
    mlperf_selection,
)
from mlharness.tasks.bfcl_v4.env import HOW_TO_FIX, find_python, require_python
from mlharness.tasks.bfcl_v4.extract import bfcl_calls, extract, has_native_tool_calls, scoring_output
from mlharness.tasks.generative import guarded
from mlharness.tasks.side_env import run_captured

log = logging.getLogger(__name__)

NAME = "bfcl_v4"
HALLUCINATION_SUBSETS = frozenset(CATEGORY_MAP["hallucination"])
RELEVANCE_SUBSETS = frozenset({"live_relevance"})  # right when it calls: bfcl-eval has no possible answers for it
SUBSET_LANGUAGE_NAMES = {"simple_java": "JAVA", "simple_javascript": "JAVASCRIPT"}
SIMPLE_AST_SUBSETS = tuple(s for s in CATEGORY_MAP["non_live"] if s.startswith("simple_"))
CATEGORY_AGGREGATION = {"live": "sample_weighted", "non_live": "hierarchical", "hallucination": "unweighted"}
UNSCORED_SUBSETS = frozenset(SINGLE_TURN_SUBSETS) - {s for subsets in CATEGORY_MAP.values() for s in subsets}
CHECKER = Path(__file__).with_name("checker.py")
DEFAULT_CHECKER_TIMEOUT_S = 600.0


def read_answers(accuracy_log: Path, who: str = NAME) -> dict[str, dict[str, Any]]:
    """Entry id -> the last answer of its session (``{}`` where the session has none), first logged entry wins."""
    answers: dict[str, dict[str, Any]] = {}
    for entry in accuracy_log_entries(accuracy_log):
        try:
            doc = json.loads(entry.data(accuracy_log).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise AccuracyError(f"{who}: {accuracy_log}: {entry.where}: the response is not the UTF-8 JSON of a "
                                f"session's answers ({e})") from e
        if not isinstance(doc, dict) or not isinstance(doc.get("session"), str) \
                or not isinstance(doc.get("answers"), list):
            raise AccuracyError(f"{who}: {accuracy_log}: {entry.where}: expected {{\"session\": id, \"answers\": "
                                f"[...]}}, got {json.dumps(doc)[:120]}")
        last = doc["answers"][-1] if doc["answers"] else {}
        answers.setdefault(doc["session"], last if isinstance(last, dict) else {})
    if not answers:
        raise AccuracyError(f"{who}: accuracy log {accuracy_log} has no entries; nothing to score")
    return answers


def _extracted(raw: str) -> str:
    try:
        return extract(raw, default="[]") or "[]"
    except (RecursionError, MemoryError, TypeError) as e:  # the reference stops there; one answer is not a run
        log.warning("bfcl_v4: an answer could not be read as calls (%s); scored as no call", type(e).__name__)
        return "[]"


def run_checker(items: list[dict[str, Any]], python: str, timeout_s: float = DEFAULT_CHECKER_TIMEOUT_S,
                who: str = NAME) -> tuple[list[dict[str, Any]], str]:
    """bfcl-eval's ``ast_checker`` over ``items`` in a subprocess of ``python``: (verdicts, bfcl-eval version)."""
    if not items:
        return [], ""
    if os.sep in python:  # the checker runs in a temporary folder: a relative path would name nothing there
        python = os.path.abspath(python)
    with tempfile.TemporaryDirectory(prefix="mlharness-bfcl-") as tmp:
        src, dst = Path(tmp) / "calls.json", Path(tmp) / "verdicts.json"
        src.write_text(json.dumps({"items": items}), encoding="utf-8")
        # bfcl-eval makes result folders under BFCL_PROJECT_ROOT when imported: keep them in the temporary folder
        env = {**os.environ, "BFCL_PROJECT_ROOT": tmp}
        done = run_captured([python, "-I", str(CHECKER), str(src), str(dst)], timeout_s, cwd=tmp, env=env,
                            timed_out=f"{who}: bfcl-eval's AST checker ({python}) did not finish {len(items)} "
                                      f"calls in {timeout_s:g} s",
                            cannot_run=f"{who}: cannot run bfcl-eval's AST checker with {python}")
        if done.returncode != 0 or not dst.is_file():
            tail = (done.stderr or done.stdout).strip()[-1500:]
            raise AccuracyError(f"{who}: bfcl-eval's AST checker ({python}) failed with exit status "
                                f"{done.returncode}:\n{tail}")
        # one verdict per call, a few hundred bytes each
        out = read_json(dst, f"{who}: the AST checker's verdicts", error=AccuracyError)
        if not isinstance(out, dict):
            raise AccuracyError(f"{who}: the AST checker's verdicts {dst} are not a JSON object")
    results = out.get("results")
    if not isinstance(results, list) or len(results) != len(items):
        raise AccuracyError(f"{who}: bfcl-eval's AST checker answered {len(results or [])} verdicts for "
                            f"{len(items)} calls")
    return results, str(out.get("bfcl_eval", ""))


def aggregate(subsets: list[str], scores: list[float]) -> dict[str, Any]:
    """``BFCLv4Scorer.score``'s breakdown of per-entry scores (0.0 or 1.0) and their subsets."""
    by_subset: dict[str, list[float]] = {}
    for s, v in zip(subsets, scores, strict=True):
        by_subset.setdefault(s, []).append(v)
    subset_results = {name: float(np.mean(v)) for name, v in by_subset.items()}
    categories: dict[str, float] = {}
    for category, members in CATEGORY_MAP.items():
        present = [s for s in members if s in subset_results]
        if not present:
            continue
        strategy = CATEGORY_AGGREGATION.get(category, "unweighted")
        if strategy == "sample_weighted":
            total = sum(len(by_subset[s]) for s in present)
            categories[category] = sum(subset_results[s] * len(by_subset[s]) for s in present) / total
        elif strategy == "hierarchical":
            simple = [subset_results[s] for s in SIMPLE_AST_SUBSETS if s in subset_results]
            top = ([float(np.mean(simple))] if simple else []) + \
                [subset_results[s] for s in present if s not in SIMPLE_AST_SUBSETS]
            if top:
                categories[category] = float(np.mean(top))
        else:
            categories[category] = float(np.mean([subset_results[s] for s in present]))
    normalized = float(np.mean(list(categories.values()))) if categories else 0.0
    return {
        "overall_accuracy": round(float(np.mean(scores)) * 100, 2) if scores else 0.0,
        "normalized_single_turn_score": round(normalized * 100, 2),
        "category_scores": {k: round(v * 100, 2) for k, v in categories.items()},
        "subset_scores": {k: round(v * 100, 2) for k, v in subset_results.items()},
        "unscored_subsets": {s: round(subset_results[s] * 100, 2) for s in UNSCORED_SUBSETS if s in subset_results},
        "total_samples": len(scores),
        "issued_samples": len(scores),
    }


def score_answers(entries: list[Entry], answers: list[dict[str, Any]], python: str | None,
                  timeout_s: float = DEFAULT_CHECKER_TIMEOUT_S, who: str = NAME) -> tuple[dict[str, Any], list]:
    """(breakdown, per-entry verdicts ``{"id", "subset", "score", "how", "error"}``) of one answer per entry."""
    verdicts: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    pending: list[int] = []
    for entry, answer in zip(entries, answers, strict=True):
        raw = scoring_output(answer)
        v: dict[str, Any] = {"id": entry.id, "subset": entry.subset, "error": ""}
        if entry.subset in HALLUCINATION_SUBSETS:
            v.update(score=0.0 if has_native_tool_calls(raw) else 1.0, how="no_call_expected")
        elif entry.subset in RELEVANCE_SUBSETS:
            v.update(score=1.0 if has_native_tool_calls(raw) else 0.0, how="call_expected")
        else:
            has_calls, calls = bfcl_calls(_extracted(raw))
            if not entry.ground_truth:
                v.update(score=0.0 if has_calls else 1.0, how="no_possible_answer")
            else:
                v.update(score=0.0, how="ast_checker")
                pending.append(len(verdicts))
                items.append({"functions": entry.function, "model_output": calls,
                              "possible_answer": entry.ground_truth,
                              "language": SUBSET_LANGUAGE_NAMES.get(entry.subset, "PYTHON"),
                              "test_category": entry.subset})
        verdicts.append(v)
    version = ""
    if items:
        if python is None:
            raise AccuracyError(f"{who}: scoring needs bfcl-eval's AST checker, and no environment has it: "
                                f"{HOW_TO_FIX}")
        results, version = run_checker(items, python, timeout_s, who)
        for i, r in zip(pending, results, strict=True):
            verdicts[i]["score"] = 1.0 if r.get("valid") else 0.0
            verdicts[i]["error"] = "; ".join(r.get("error") or []) or r.get("error_type", "")
    breakdown = aggregate([v["subset"] for v in verdicts], [v["score"] for v in verdicts])
    if version:
        breakdown["bfcl_eval"] = version
    return breakdown, verdicts


def accuracy_text(breakdown: dict[str, Any], scored: int, total: int) -> str:
    """accuracy.txt: ``mAP=<overall_accuracy>`` (the submission checker's pattern for qwen3.6-27b) then the
    breakdown as JSON; a log covering part of the selection gets the subset line instead of ``mAP=``."""
    figure = breakdown["overall_accuracy"]
    head = f"mAP={figure}\n" if scored == total else \
        subset_line(scored, total, "entries", f"overall_accuracy={figure}")
    return head + json.dumps(breakdown, sort_keys=True) + "\n"


def score_log(accuracy_log: Path, dataset: Path | str | None, selection: str = "mlperf",
              python: str | None = None, timeout_s: float = DEFAULT_CHECKER_TIMEOUT_S) -> AccuracyResult:
    """Score an accuracy log of session answers against a BFCL v4 folder (None: bfcl-eval's own data)."""
    if selection not in ("mlperf", "all"):
        raise AccuracyError(f"{NAME}: option 'selection' must be 'mlperf' or 'all', got {selection!r}")
    python = find_python(python)
    entries = load_entries(dataset)
    chosen = mlperf_selection(entries) if selection == "mlperf" else entries
    by_id = {e.id: e for e in chosen}
    answers = read_answers(accuracy_log)
    unknown = [sid for sid in answers if sid not in by_id]
    if unknown:
        raise AccuracyError(f"{NAME}: {accuracy_log}: {len(unknown)} session(s) are not entries of the "
                            f"{selection} selection of {dataset or 'bfcl-eval data'} ({len(chosen)} entries), "
                            f"e.g. {unknown[0]!r}")
    scored = [e for e in chosen if e.id in answers]  # the selection's order
    breakdown, verdicts = score_answers(scored, [answers[e.id] for e in scored], python, timeout_s)
    details = {**breakdown, "verdicts": verdicts, "selection": selection, "selected": len(chosen),
               "dataset": str(dataset) if dataset is not None else "bfcl-eval", "python": python or sys.executable}
    return AccuracyResult(text=accuracy_text(breakdown, len(scored), len(chosen)),
                          value=breakdown["overall_accuracy"], name="overall_accuracy", details=details,
                          official=len(scored) == len(chosen))


class BFCLv4Metric(AccuracyMetric):
    """BFCL v4 single-turn accuracy of a session accuracy log (qwen3.6-27b). Options: ``selection`` ("mlperf", the
    reference's 995-entry preset, or "all"), ``bfcl_python`` (else ``MLHARNESS_BFCL_PYTHON``, else the cache's
    environment ``mlharness accuracy bfcl-v4 --setup`` makes),
    ``checker_timeout_s`` (600). The run's dataset folder holds the official files; none: bfcl-eval's data."""

    name = NAME

    def preflight(self, options: dict[str, Any]) -> None:
        """bfcl-eval's environment is there and imports the AST checker at the pinned version (once per process)."""
        require_python(options.get("bfcl_python"), self.name)

    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        opts = ctx.options
        timeout_s = float(opts.get("checker_timeout_s", DEFAULT_CHECKER_TIMEOUT_S))
        if not 0 < timeout_s <= 86400:
            raise AccuracyError(f"{self.name}: option 'checker_timeout_s' must be in (0, 86400], got {timeout_s}")
        return guarded(self.name, lambda: score_log(accuracy_log, ctx.dataset_path,
                                                    str(opts.get("selection", "mlperf")),
                                                    opts.get("bfcl_python"), timeout_s))
