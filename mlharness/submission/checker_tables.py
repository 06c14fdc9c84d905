"""The official submission checker's tables of a round, kept as data: which scenarios each system type must
and may submit for a benchmark, and the least ``min_query_count`` a run states.

Each ``checker_tables/<round>.json`` is ``MODEL_CONFIG[<round>]`` of mlcommons/inference's
``tools/submission/submission_checker/constants.py`` (its ``models``, ``required-scenarios-*``,
``optional-scenarios-*`` and ``min-queries`` keys), copied at the commit the file names. The checker reads them so
(``configuration.py``, ``loader.py``, ``checks/performance_check.py`` at that commit), and so does mlharness:

- the system type picks the table: ``datacenter``, ``edge``, or ``datacenter,edge`` (``-datacenter-edge``); a
  benchmark absent from it has no rule there, and the checker stops on such a tree with a TypeError;
- every required scenario must be there; a scenario neither required nor optional is unknown; a benchmark whose
  optional scenarios include both Server and Interactive needs one of them (#2654);
- the ``min-queries`` figure is held against the log's ``effective_min_query_count`` only in the scenarios that do
  not use early stopping (Offline): SingleStream, MultiStream and Server (Interactive runs are LoadGen Server runs)
  are judged by early stopping instead, and results in the endpoints layout are not held to it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from mlharness.fileguard import read_json

TABLE_KEYS = {"datacenter": "datacenter", "edge": "edge", "datacenter,edge": "datacenter-edge"}
EARLY_STOPPING = ("Server", "SingleStream", "MultiStream")  # the checker's uses_early_stopping
ONE_OF = ("Server", "Interactive")  # both optional: one of them is required


FOLDER = Path(__file__).resolve().parent / "checker_tables"


@functools.cache
def table(round_name: str) -> dict[str, Any]:
    """The round's tables (KeyError for a round no table was kept of)."""
    path = FOLDER / f"{round_name}.json"
    if not path.is_file():
        raise KeyError(round_name)
    return read_json(path, f"the submission checker's tables of round {round_name}")


def rounds() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in FOLDER.iterdir() if p.name.endswith(".json"))


def scenarios(round_name: str, kind: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """``kind`` 'required' or 'optional': system type -> benchmark -> scenarios, as the checker lists them."""
    t = table(round_name)
    return {system: {model: tuple(s) for model, s in t[f"{kind}-scenarios-{key}"].items()}
            for system, key in TABLE_KEYS.items()}


def one_of(optional: tuple[str, ...]) -> tuple[str, ...]:
    """The scenarios of which one is required: Server and Interactive when both are optional."""
    return ONE_OF if set(ONE_OF) <= set(optional) else ()


def min_queries(round_name: str, benchmark: str, scenario: str) -> int | None:
    """The least ``effective_min_query_count`` the checker accepts, or None where it holds none: a scenario with
    early stopping (Interactive is a LoadGen Server run), or no row."""
    if scenario in EARLY_STOPPING or scenario == "Interactive":
        return None
    value = table(round_name)["min-queries"].get(benchmark, {}).get(scenario)
    return int(value) if value else None


def source(round_name: str) -> str:
    t = table(round_name)
    return f"{t['source']} at {t['commit'][:8]}"


__all__ = ["EARLY_STOPPING", "ONE_OF", "TABLE_KEYS", "min_queries", "one_of", "rounds", "scenarios", "source",
           "table"]
