"""BFCL v4 single-turn data in its official layout, the MLPerf selection of it, and each entry as a Session.

The layout is the one the ``bfcl-eval`` wheel ships in ``bfcl_eval/data/``: ``BFCL_v4_<subset>.json`` (JSON
lines: ``id``, ``question`` (turns of OpenAI messages), ``function`` (BFCL function docs)) and
``possible_answer/BFCL_v4_<subset>.json`` (``id``, ``ground_truth``; none for the irrelevance subsets). Everything
here reproduces the MLCommons endpoints reference (``dataset_manager/predefined/bfcl_v4``): the subsets it loads
and their order, the selection of ``online_edge_full_run.yaml`` (62 / 10 / 10 percent of each subset of the
non_live / live / hallucination categories, subsets of at most 25 taken in full, the first ``n`` of each subset in
file order, subsets in alphabetical order as pandas' ``groupby`` yields them), and the request: the question's
messages flattened (``content: null`` sent as ``""``), the functions as OpenAI tools the way bfcl-eval's
``convert_to_tool`` makes them for ``ModelStyle.OPENAI_COMPLETIONS`` (dots in names become underscores, BFCL
types become JSON-schema types), ``tool_choice: "auto"``, no system prompt of its own.
"""

from __future__ import annotations

import copy
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import iter_jsonl
from mlharness.kinds.sessions.model import Session, Turn
from mlharness.tasks.bfcl_v4.env import HOW_TO_FIX, PYTHON_ENV, find_python
from mlharness.tasks.bfcl_v4.oracle import openai_name, oracle_answer

SINGLE_TURN_SUBSETS = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
                       "parallel_multiple", "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
                       "irrelevance", "live_irrelevance", "live_relevance")
CATEGORY_MAP = {
    "non_live": ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple"),
    "live": ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"),
    "hallucination": ("irrelevance", "live_irrelevance"),
}
SUBSET_TO_CATEGORY = {s: cat for cat, subsets in CATEGORY_MAP.items() for s in subsets}
# online_edge_full_run.yaml's generate_params: "the fixed MLPerf reference configuration"
MLPERF_CATEGORIES = ("non_live", "live", "hallucination")
MLPERF_CATEGORY_PCT = {"non_live": 62, "live": 10, "hallucination": 10}
MLPERF_SUBSET_FLOOR = 25
TOOL_CHOICE = "auto"  # the reference sends it on every request (some servers stall without it)

# bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI
GORILLA_TO_OPENAPI = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object", "tuple": "array",
    "any": "string", "byte": "integer", "short": "integer", "long": "integer", "double": "number", "char": "string",
    "ArrayList": "array", "Array": "array", "HashMap": "object", "Hashtable": "object", "Queue": "array",
    "Stack": "array", "Any": "string", "String": "string", "Bigint": "integer",
}


@dataclass(frozen=True)
class Entry:
    """One BFCL v4 test entry with its ground truth (``[]`` where the subset has none: irrelevance)."""

    id: str
    subset: str
    question: list[list[dict[str, Any]]]
    function: list[dict[str, Any]]
    ground_truth: list[dict[str, Any]]

    @property
    def category(self) -> str | None:
        return SUBSET_TO_CATEGORY.get(self.subset)


def bfcl_python() -> str | None:
    """bfcl-eval's Python: ``MLHARNESS_BFCL_PYTHON``, else the environment ``--setup`` made in the cache, or None."""
    return find_python()


def bfcl_data_dir(python: str | None = None) -> Path:
    """``bfcl_eval/data`` of the bfcl-eval environment (found without importing bfcl_eval there)."""
    python = python or bfcl_python()
    if python is None:
        raise DatasetError("BFCL v4: no dataset folder was given and no bfcl-eval environment was found (its wheel "
                           "ships the data); either pass a folder of BFCL_v4_<subset>.json files (mlharness dataset "
                           f"synth bfcl-v4 writes one), or {HOW_TO_FIX}")
    code = "import importlib.util as u; print(list(u.find_spec('bfcl_eval').submodule_search_locations)[0])"
    try:
        out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise DatasetError(f"BFCL v4: cannot locate bfcl_eval with {PYTHON_ENV}={python}: {e}") from e
    return Path(out.stdout.strip()) / "data"


def data_folder(path: Path | str | None) -> Path:
    """The folder holding ``BFCL_v4_<subset>.json``: ``path`` itself, its ``data/`` or ``bfcl_v4/raw/`` (the
    reference's local layout), or bfcl-eval's own data when ``path`` is None."""
    if path is None:
        return bfcl_data_dir()
    root = Path(path)
    for folder in (root, root / "data", root / "bfcl_v4" / "raw"):
        if any((folder / f"BFCL_v4_{s}.json").is_file() for s in SINGLE_TURN_SUBSETS):
            return folder
    raise DatasetError(f"BFCL v4: {root} holds no BFCL_v4_<subset>.json file of the single-turn subsets "
                       f"({', '.join(SINGLE_TURN_SUBSETS)}), nor does its data/ or bfcl_v4/raw/ folder")


def _json_lines(path: Path) -> list[dict[str, Any]]:
    # a BFCL entry (a question, its functions' documentation) is a few KiB: the door's line bound holds any
    return [row for _, row in iter_jsonl(path, "BFCL v4 subset", error=DatasetError)]


def load_entries(path: Path | str | None = None) -> list[Entry]:
    """Every single-turn entry of the folder (``None``: bfcl-eval's data), subsets in the reference's order, each
    in file order; a subset whose file is missing is skipped, as the reference skips it; an entry without a
    question is dropped, as the reference drops it."""
    folder = data_folder(path)
    entries: list[Entry] = []
    for subset in SINGLE_TURN_SUBSETS:
        data_file = folder / f"BFCL_v4_{subset}.json"
        if not os.path.lexists(data_file):  # anything else there (a FIFO, a folder) is the door's error naming it
            continue
        answers_file = folder / "possible_answer" / f"BFCL_v4_{subset}.json"
        truths = {r.get("id", ""): r.get("ground_truth", []) for r in _json_lines(answers_file)} \
            if os.path.lexists(answers_file) else {}
        for row in _json_lines(data_file):
            if not row.get("question"):
                continue
            entries.append(Entry(id=row.get("id", ""), subset=subset, question=row["question"],
                                 function=row.get("function", []), ground_truth=truths.get(row.get("id", ""), [])))
    if not entries:
        raise DatasetError(f"BFCL v4: {folder} has no single-turn entries")
    return entries


def mlperf_selection(entries: list[Entry], categories: tuple[str, ...] = MLPERF_CATEGORIES,
                     category_pct: dict[str, float] | None = None,
                     subset_floor: int | None = MLPERF_SUBSET_FLOOR) -> list[Entry]:
    """The entries the reference's ``BFCLv4.generate`` keeps for these generate_params (MLPerf's by default)."""
    pct = MLPERF_CATEGORY_PCT if category_pct is None else category_pct
    wanted = {s for c in categories for s in CATEGORY_MAP[c]}
    by_subset: dict[str, list[Entry]] = {}
    for e in entries:
        if e.subset in wanted:
            by_subset.setdefault(e.subset, []).append(e)
    chosen: list[Entry] = []
    for subset in sorted(by_subset):  # pandas groupby: sorted keys
        group = by_subset[subset]
        total = len(group)
        rate = pct.get(SUBSET_TO_CATEGORY[subset])
        if subset_floor is not None and total <= subset_floor:
            n = total
        elif rate is not None:
            n = max(1, int(total * rate / 100))
        else:
            n = total
        chosen.extend(group[:n])
    return chosen


def _cast_to_openai_type(properties: dict[str, Any]) -> dict[str, Any]:
    """bfcl-eval's ``_cast_to_openai_type`` with ``GORILLA_TO_OPENAPI`` (the same mutations, the same order)."""
    mapping = GORILLA_TO_OPENAPI
    for key, value in properties.items():
        if "type" not in value:
            properties[key]["type"] = "string"
        else:
            var_type = value["type"]
            if var_type == "float":
                properties[key]["format"] = "float"
                properties[key]["description"] += " This is a float type value."
            properties[key]["type"] = mapping.get(var_type, "string")
        if properties[key]["type"] in ("array", "object"):
            if "properties" in properties[key]:
                properties[key]["properties"] = _cast_to_openai_type(properties[key]["properties"])
            elif "items" in properties[key]:
                items = properties[key]["items"]
                items["type"] = mapping[items["type"]]
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = mapping[items["items"]["type"]]
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast_to_openai_type(items["properties"])
    return properties


def to_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)``."""
    tools = []
    for item in copy.deepcopy(functions):
        if "." in item["name"]:
            item["name"] = openai_name(item["name"])
        item["parameters"]["type"] = "object"
        item["parameters"]["properties"] = _cast_to_openai_type(item["parameters"]["properties"])
        tools.append({"type": "function", "function": item})
    return tools


def messages(entry: Entry) -> list[dict[str, Any]]:
    """The question's messages flattened, ``content: null`` sent as ``""`` (as the reference sends them)."""
    return [{"role": m["role"], "content": m.get("content") or ""} for turn in entry.question for m in turn]


def to_session(entry: Entry) -> Session:
    """The entry as a one-turn Session: its messages, its tools, the ground-truth call(s) as the recorded answer;
    ``meta`` carries the subset and the reference's ``tool_choice``."""
    try:
        tools = to_tools(entry.function)
    except (KeyError, TypeError, AttributeError) as e:
        raise DatasetError(f"BFCL v4: entry {entry.id}: its function docs cannot be converted to OpenAI tools "
                           f"(missing or malformed {e})") from e
    turn = Turn(messages=tuple(messages(entry)), recorded=oracle_answer(entry).message())
    return Session(id=entry.id, turns=(turn,), tools=tuple(tools),
                   meta={"source": "bfcl_v4", "subset": entry.subset, "category": entry.category,
                         "tool_choice": TOOL_CHOICE})
