"""The data kinds table: every response kind the manifest schema admits has its row, and the runner asks the row
instead of branching on the kind's name."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

from mlharness.manifest.schema import ResponseSpec
from mlharness.run.kinds import KINDS

RUN = Path(__file__).resolve().parents[1] / "mlharness" / "run"


def test_the_table_has_a_row_for_each_kind_the_schema_admits():
    admitted = set(typing.get_args(ResponseSpec.model_fields["kind"].annotation))
    assert admitted == set(KINDS)
    for name, row in KINDS.items():
        assert row.name == name
        assert row.tokens == row.interactive  # only token streams have TTFT/TPOT to be Interactive about


def test_no_module_of_the_run_branches_on_a_kind_name():
    """`if ... == "tokens"` (or `.tokens` / `.kind` compared to a kind's name) in the run package would be a second
    table; only kinds.py names the kinds."""
    offenders = []
    for path in sorted(RUN.glob("*.py")):
        if path.name == "kinds.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                names = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                offenders += [f"{path.name}:{node.lineno}" for n in names if n in KINDS]
    assert not offenders, offenders
