"""One round per results tree: ``submission run`` records the round it ran for, and ``submission package``
refuses a tree whose runs carry another round's seeds than the round it packages for (the official checker of
that round would reject every such run), or whose benchmark folders that round's checker cannot read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.errors import SettingsError
from mlharness.loadgen.logs import detail_values
from mlharness.rounds import (
    MLPERF_BENCHMARKS,
    SEED_KEYS,
    check_in_suite,
    get_round,
    round_of_seeds,
    wrong_seeds,
)
from mlharness.submission.findings import listed, shown
from mlharness.submission.layout import Tree

# the runs whose seeds the official checker checks, relative to a scenario directory (TEST05 has its own seeds)
PERF_RUNS = ("performance/run_1", "TEST01/performance/run_1", "TEST04/performance/run_1")


def record_round(tree: Tree, state: dict[str, Any], round_name: str) -> None:
    """Refuse to add runs of one round to a tree made for another; then record the round in the state."""
    recorded = state.get("round")
    if recorded not in (None, round_name):
        raise SettingsError(f"{tree.root} holds results for round {recorded}, not {round_name}: a results tree "
                            f"holds the runs of one round (their seeds differ); use another --results folder")
    state["round"] = round_name


def round_to_package(tree: Tree, state: dict[str, Any], requested: str | None) -> str:
    """The round a package of this tree is for: ``requested`` or else the round the tree's runs were made for.
    Refuses (SettingsError, nothing packaged) when the tree was made for another round or when a performance or
    compliance run's detail log carries seeds other than that round's."""
    recorded = state.get("round")
    r = get_round(requested or recorded)
    if recorded is not None and recorded != r.name:
        raise SettingsError(f"{tree.root} was made for round {recorded} (`submission run --round {recorded}`), "
                            f"not {r.name}: its runs carry the seeds of {recorded}, which the official checker "
                            f"rejects with --version {r.name}. Package it with --round {recorded}, or redo the "
                            f"runs with `submission run --round {r.name}` into another --results folder")
    _check_suite(tree, state, r.name)
    wrong = []
    for _system, _bench, _scen, path in tree.scenario_dirs():
        for rel in PERF_RUNS:
            detail = path / rel / "mlperf_log_detail.txt"
            if detail.is_file():
                problems = _seed_problems(r.name, detail)
                if problems:
                    wrong.append(f"{shown(detail.relative_to(tree.root))}: {problems}")
    if wrong:
        raise SettingsError(f"{len(wrong)} run(s) in {shown(tree.root)} do not carry the seeds of round {r.name}, so "
                            f"the official checker (--version {r.name}) would reject them: {listed(wrong)}. Redo them with `submission run --round {r.name}`, or package for their round")
    return r.name


def _check_suite(tree: Tree, state: dict[str, Any], round_name: str) -> None:
    """Refuse benchmark folders the round's official checker cannot read: an MLPerf benchmark of another round
    (any division), and in the closed and network divisions any name that is not one of the round's benchmark
    IDs (the open division maps custom names through model_mapping.json)."""
    suite = get_round(round_name).benchmarks
    closed = state.get("division") in ("closed", "network")
    for bench in sorted({bench for _system, bench, _scen, _path in tree.scenario_dirs()}):
        if bench in suite:
            continue
        if bench in MLPERF_BENCHMARKS:
            check_in_suite(round_name, bench, str(tree.root))
        if closed:
            raise SettingsError(f"{tree.root}: '{bench}' is not a benchmark ID of round {round_name}, so the "
                                f"official checker cannot read its results in the {state['division']} division; "
                                f"name the benchmark in the manifest's mlperf.benchmark "
                                f"({', '.join(sorted(suite))}) and redo the runs")


def _seed_problems(round_name: str, detail: Path) -> str:
    values = detail_values(detail)
    found = {k: values.get(f"effective_{k}") for k in SEED_KEYS}
    problems = wrong_seeds(get_round(round_name), found)
    if not problems:
        return ""
    other = round_of_seeds(found)
    return ", ".join(problems) + (f" (the seeds of round {other})" if other else "")
