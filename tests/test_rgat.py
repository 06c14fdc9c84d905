"""rgat and the graph input: the sampler's fan-outs and seeds, edges outside their node tables refused (exit 2),
and rgat-oracle scoring exactly 100% through the whole graph path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mlharness.kinds.graph.input import GraphSettings, open_graph  # noqa: E402
from mlharness.tasks.rgat.synth import write_synthetic_igbh  # noqa: E402

MLH = [sys.executable, "-m", "mlharness"]


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    return write_synthetic_igbh(tmp_path_factory.mktemp("igbh"), papers=120, dim=16)


def test_sampler_fanouts_and_seed(igbh):
    graph = open_graph(igbh / "tiny" / "processed", GraphSettings(fanouts=(1, 1, 2)))
    assert len(graph.etypes) == 11  # the reference's six edge types and five reverses
    a = graph.sample_arrays(np.array([3, 7]))
    b = graph.sample_arrays(np.array([7]))
    ntypes, etypes = graph.ntypes, graph.etypes
    paper = ntypes.index("paper")
    seeds_x = a[paper][:2]
    assert np.array_equal(seeds_x, graph.features["paper"][[3, 7]])  # the seeds come first, in batch order
    # the first hop takes at most the last fan-out (2) in-neighbours per seed and edge type
    for k, (src, _, dst) in enumerate(etypes):
        if dst == "paper":
            edges = b[len(ntypes) + k]
            assert 0 < (edges[1] == 0).sum() <= 2 or src != "paper"
    # a seed's neighbourhood does not depend on its batch, and the same seed gives the same sample
    again = graph.sample_arrays(np.array([7]))
    assert all(np.array_equal(x, y) for x, y in zip(b, again, strict=True))
    alone = graph.sample_arrays(np.array([3]))  # the batch [3, 7] is the disjoint union of [3] and [7]
    sizes = [lambda x: x.shape[0]] * len(ntypes) + [lambda x: x.shape[1]] * len(etypes)  # nodes, then edges
    assert all(n(x) == n(y) + n(z) for n, x, y, z in zip(sizes, a[:-1], alone[:-1], b[:-1], strict=True))
    other = open_graph(igbh / "tiny" / "processed", GraphSettings(fanouts=(1, 1, 2), seed=7)).sample_arrays(
        np.array([7]))
    assert any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(b, other, strict=True))


def test_edges_outside_their_node_table_exit_2(tmp_path):
    root = write_synthetic_igbh(tmp_path / "bad", papers=40, dim=8)
    path = root / "tiny" / "processed" / "paper__written_by__author" / "edge_index.npy"
    edges = np.load(path)
    edges[5, 1] = 10_000
    np.save(path, edges)
    r = subprocess.run(MLH + ["run", "--manifest", "rgat-oracle", "--dataset-path", str(root), "--scenario",
                              "Offline", "--mode", "accuracy", "--results", str(tmp_path / "res")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "edge_index.npy: edge 5: field 'destination'" in r.stderr and "'author' node table" in r.stderr


def test_oracle_scores_exactly_its_maximum(tmp_path):
    root = write_synthetic_igbh(tmp_path / "igbh", papers=80, dim=8)
    r = subprocess.run(MLH + ["run", "--manifest", "rgat-oracle", "--dataset-path", str(root), "--scenario",
                              "Offline", "--mode", "accuracy", "--results", str(tmp_path / "res")],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "res" / "default" / "rgat" / "Offline" / "accuracy" / "accuracy.txt").read_text()
    assert text.startswith("accuracy=100.000%, good=20, total=20")


def test_random_offline_valid_with_only_min_duration(tmp_path):
    """The default development command: mlperf.conf's rgat Offline count (788,379, one query of every paper) is
    lowered to what the calibrated rate needs in min_duration, so the run lasts seconds and is VALID."""
    root = tmp_path / "igbh"
    r = subprocess.run(MLH + ["dataset", "synth", "rgat", "--out", str(root), "--papers", "40"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "perf"
    r = subprocess.run(MLH + ["run", "--manifest", "rgat-random", "--dataset-path", str(root), "--scenario",
                              "Offline", "--mode", "performance", "--min-duration-ms", "300", "--output", str(out),
                              "--no-progress"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert "--min-query-count 788379 restores the official count" in r.stdout + r.stderr
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert "Result is : VALID" in summary, summary
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["calibration"]["development_sizing"]["min_query_count"][0] == 788379
    assert 0 < meta["samples"]["issued"] < 1000


def test_accuracy_line_equals_the_official_script_on_a_random_log(tmp_path):
    """accuracy_igbh.py's output on rgat-random's log (2 of 30 right), kept with its command in fixtures/rgat."""
    fixtures = Path(__file__).parent / "fixtures" / "rgat"
    root = write_synthetic_igbh(tmp_path / "igbh", papers=120)  # what `dataset synth rgat --papers 120` writes
    r = subprocess.run(MLH + ["accuracy", "rgat", "--log", str(fixtures / "random_mlperf_log_accuracy.json"),
                              "--dataset-path", str(root), "--dataset-size", "tiny", "--dtype", "uint8"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    official = (fixtures / "official_accuracy_igbh_output.txt").read_text()
    assert official == "accuracy=6.667%, good=2, total=30"  # not an oracle's 100%
    assert r.stdout == official


def test_igbh_accuracy_is_rgats_official_metric():
    from mlharness.tasks.base import AccuracyResult, official_figure

    result = AccuracyResult(text="accuracy=6.667%, good=2, total=30", value=6.667, name="acc")
    assert official_figure(result, "igbh_accuracy", "rgat")
    assert not official_figure(result, "imagenet_top1", "rgat")
