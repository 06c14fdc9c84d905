"""The data kinds' registry: every built-in kind has its row, named as it is registered; a run admits the response
kinds there are and refuses others naming the field; the runner asks the row instead of branching on a kind's
name; a kind registered by a program is found, and one that breaks the interface is refused."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mlharness.errors import ManifestError
from mlharness.kinds import registry
from mlharness.kinds.base import Kind
from mlharness.manifest.loader import load_manifest

RUN = Path(__file__).resolve().parents[1] / "mlharness" / "run"


def test_every_built_in_kind_has_its_row():
    for name in registry.BUILTIN:
        row = registry.get(name)
        assert row.name == name
        assert row.responds is (name in registry.BUILTIN_RESPONSES)
        assert (row.make_input is not None) is (name in registry.BUILTIN_INPUTS)
        assert row.tokens == row.interactive  # only token streams have TTFT/TPOT to be Interactive about
        assert row.responds or row.make_input is not None
    assert registry.response_names() == sorted(registry.BUILTIN_RESPONSES)


def test_a_manifest_naming_a_kind_there_is_not_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nframework: {name: echo}\ninputs: [{name: x}]\noutputs: [{name: y}]\n"
                    "response: {kind: tensr}\n")
    with pytest.raises(ManifestError) as e:
        registry.check_inputs(load_manifest(str(path)))  # what a run and `mlharness manifest check` call
    assert "response.kind" in str(e.value) and "unknown kind 'tensr'" in str(e.value), e.value
    assert "tensor" in str(e.value)  # the kinds there are, the nearest first
    # an input kind alone is not a response kind
    path.write_text(path.read_text().replace("tensr", "chat"))
    with pytest.raises(ManifestError, match="unknown kind 'chat'"):
        registry.check_inputs(load_manifest(str(path)))


def test_no_module_of_the_run_branches_on_a_kind_name():
    """`if ... == "tokens"` (or `.tokens` / `.kind` compared to a kind's name) in the run package would be a second
    table; only the kinds' own packages name them."""
    offenders = []
    for path in sorted(RUN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                names = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                offenders += [f"{path.name}:{node.lineno}" for n in names if n in registry.BUILTIN]
    assert not offenders, offenders


def test_a_registered_kind_is_found_and_a_broken_row_is_refused():
    from mlharness.kinds.tensor import kind as tensor

    row = Kind("toy-echo", make_sut=tensor.make_sut, server_bound=tensor.bound, calibrate=tensor.calibration)
    registry.register(row)
    try:
        assert registry.get("toy-echo") is row and "toy-echo" in registry.response_names()
    finally:
        registry.unregister("toy-echo")
    assert "toy-echo" not in registry.names()
    with pytest.raises(registry.KindError, match="'tensor' is built in"):
        registry.register(Kind("tensor", make_sut=tensor.make_sut, server_bound=tensor.bound,
                               calibrate=tensor.calibration))
    with pytest.raises(ValueError, match="make_sut, server_bound and calibrate"):
        Kind("half", make_sut=tensor.make_sut)
    with pytest.raises(ValueError, match="plays no role"):
        Kind("none")
    with pytest.raises(ValueError, match="lower-case"):
        Kind("Bad Name", make_input=lambda ctx, path: None)
    with pytest.raises(registry.KindError, match="unknown data kind 'tokes'.*tokens"):
        registry.get("tokes")
