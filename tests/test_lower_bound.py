"""`mlharness analyze lower-bound` on a small ONNX model built here: two identical convolutions measured once, a
parallel branch, bounds that order as they must, and the layer timings read back from the evaluation database."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mlharness.measurement.lowerbound import LowerBoundConfig, analyze, fusible_chains  # noqa: E402
from mlharness.results_db.db import sqlite_url  # noqa: E402


def small_model(path):
    """x -> conv1 -> relu1 -> conv2 -> relu2 -+-> add -> relu3 (conv1, conv2: the same configuration)
       x -> conv3 (1x1) ---------------------+"""
    rng = np.random.default_rng(0)
    w = {name: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
         for name, shape in (("w1", (32, 32, 3, 3)), ("w2", (32, 32, 3, 3)), ("w3", (32, 32, 1, 1)))}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["x", "w3"], ["c3"], name="conv3"),
             helper.make_node("Add", ["r2", "c3"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu3")]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(w.values()))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    work = tmp_path_factory.mktemp("lower-bound")
    model = small_model(work / "small.onnx")
    cfg = LowerBoundConfig(model=model, db=sqlite_url(work), runs=15, threads=1)
    return work, model, analyze(cfg), analyze(cfg)


def test_identical_layers_are_measured_once_and_the_bounds_order(analysed):
    _, _, r, _ = analysed
    rows = {x["node"]: x for x in r["layers"]}
    assert r["nodes"] == 7 and not r["not_measured_alone"]
    # conv1 = conv2, relu1 = relu2 = relu3: 4 layer configurations and 2 fusible chains (conv1>relu1,
    # conv2>relu2>add>relu3; conv3's reader, add, is taken)
    assert r["configurations"] == 6 and r["configurations_from_db"] == 0
    assert rows["conv1"]["alone_s"] == rows["conv2"]["alone_s"] > 0
    assert rows["relu1"]["alone_s"] == rows["relu3"]["alone_s"]
    b, m = r["bounds_s"], r["measured_s"]
    assert b["parallel"] < b["sequential"]  # conv3 runs beside the conv1 > conv2 path
    assert b["parallel"] == pytest.approx(b["sequential"] - rows["conv3"]["alone_s"])
    assert b["fused"] <= b["sequential"]
    # both bounds are below the latency they bound (the kernels' sum of the same profiled runs), within noise
    assert b["sequential"] <= 1.5 * m["unoptimised"] and b["parallel"] <= 1.5 * m["unoptimised"]
    assert m["kernels_unoptimised"] <= m["unoptimised"]
    gap = r["gap_s"]
    if gap > 0:  # the nodes' excess and the framework's overhead make up the gap exactly
        total = sum(x["excess_s"] for x in r["layers"]) + r["advice"]["framework_overhead"]["seconds"]
        assert total == pytest.approx(gap, rel=1e-6, abs=1e-9)


def test_a_second_analysis_reads_every_layer_from_the_database(analysed):
    _, _, first, second = analysed
    assert second["configurations_from_db"] == second["configurations"] == first["configurations"]
    assert second["bounds_s"]["sequential"] == pytest.approx(first["bounds_s"]["sequential"])


def test_the_command_writes_its_report_and_plot(run_cli, analysed, tmp_path):
    work, model, _, _ = analysed
    out = tmp_path / "report"
    proc = run_cli("analyze", "lower-bound", str(model), "--db", sqlite_url(work), "--runs", "5", "--output",
                   str(out), "--json", "--threads", "1")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["configurations_from_db"] == r["configurations"]
    assert json.loads((out / "lower_bound.json").read_text())["nodes"] == 7
    md = (out / "lower_bound.md").read_text()
    assert "| sequential lower bound |" in md and "![per-layer times](lower_bound_layers.png)" in md
    assert (out / "lower_bound_layers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = run_cli("analyze", "lower-bound", str(model), "--db", sqlite_url(work), "--output", str(out))
    assert again.returncode == 2 and "exists" in again.stderr


def test_a_symbolic_dimension_without_a_size_is_named(run_cli, tmp_path):
    model = tmp_path / "m.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "width"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    proc = run_cli("analyze", "lower-bound", str(model), "--results-root", str(tmp_path / "r"))
    assert proc.returncode == 2 and "symbolic dimension 'width'" in proc.stderr and "--dim width=N" in proc.stderr
    ok = run_cli("analyze", "lower-bound", str(model), "--results-root", str(tmp_path / "r"), "--dim", "width=64",
                 "--runs", "3", "--json")
    assert ok.returncode == 0, ok.stderr


def test_fusible_chains_are_disjoint():
    n = [SimpleNamespace(name=a, op_type=op, input=i, output=o) for a, op, i, o in (
        ("mm", "MatMul", ["x"], ["a"]), ("bias", "Add", ["a", "b"], ["c"]), ("act", "Relu", ["c"], ["d"]),
        ("mm2", "MatMul", ["d"], ["e"]), ("use1", "Relu", ["e"], ["f"]), ("use2", "Relu", ["e"], ["g"]))]
    chains = fusible_chains(n, graph_outputs={"f", "g"})
    assert [[m.name for m in ch] for ch in chains] == [["mm", "bias", "act"]]  # mm2's output has two readers


def test_a_constant_node_costs_nothing_and_counts_as_measured(tmp_path):
    """ONNX Runtime makes a Constant node an initializer: no kernel runs for it, alone or in the model."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph([helper.make_node("Constant", [], ["c"], name="const", value=one),
                               helper.make_node("Add", ["x", "c"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = tmp_path / "c.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    r = analyze(LowerBoundConfig(model=model, db=sqlite_url(tmp_path), runs=3, threads=1))
    rows = {x["node"]: x for x in r["layers"]}
    assert r["not_measured_alone"] == [] and rows["const"]["alone_s"] == 0.0 and rows["add"]["alone_s"] > 0
