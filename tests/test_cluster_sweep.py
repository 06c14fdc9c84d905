"""`mlharness sweep --cluster`: an explicit list of points run at once as jobs on a Ray cluster of three nodes on this
host (tests/helpers/ray_cluster.py: node a offers acc_a, b acc_b, c neither; one CPU each), gathered into the one
sweep folder where a local sweep puts them, each naming its node, the analysis computed as for a local sweep; the
plans and remote models that cannot be spread are refused with the reason, before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlharness.measurement import sweep_plan as sp
from tests.helpers.ray_cluster import ray_cluster, toy_manifest  # noqa: F401 - the fixture


def cli(env: dict[str, str], *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def sweep_args(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    manifest = tmp_path / "toy" / "steady.yaml"
    manifest.parent.mkdir(exist_ok=True)
    # a fixed-capacity toy: each sample's postprocess sleeps 2 ms, so it keeps up with 100 QPS on any host
    manifest.write_text(toy_manifest("steady", postprocess="time.sleep(0.002)"))
    return ["sweep", "--manifest", str(manifest), "--count", "16", "--min-duration-ms", "300", "--min-query-count",
            "20", "--slo", "latency_p99=50ms", "--output", str(out), *extra]


@pytest.mark.slow
def test_a_list_of_points_runs_at_once_on_the_nodes_and_lands_in_one_sweep_folder(ray_cluster, tmp_path):  # noqa: F811
    env = ray_cluster.env(dict(os.environ))
    out = tmp_path / "sweep"
    run = cli(env, *sweep_args(tmp_path, out, "--qps", "20,40,60", "--cluster", "auto", "--share-host"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "waits for its turn on this host" not in run.stdout + run.stderr  # --share-host: no point waited
    state = json.loads((out / "sweep.json").read_text())
    assert state["complete"] is True and [p["value"] for p in state["points"]] == [20, 40, 60]
    nodes = set()
    for p in state["points"]:
        folder = out / p["dir"]
        assert p["dir"] == f"points/{p['label']}" and (folder / "mlperf_log_summary.txt").is_file()
        assert (folder / "mlperf_log_trace.json").is_file() and p["samples"] >= 20 and p["goodput"] is not None
        ran = json.loads((folder / "mlharness_run.json").read_text())["executor"]
        assert ran["node_id"] == p["node"]["node_id"]  # the point and its run name the same node
        nodes.add(p["node"]["node_id"])
        assert p["node"]["node_id"][:12] in run.stdout
    # three points on three one-CPU nodes: they ran at once (--share-host), one per node
    assert nodes == {ray_cluster.node_id(n) for n in ("a", "b", "c")}
    # the analysis is the local sweep's, from the same points
    aggs = sp.by_value(state["points"])
    assert state["aggregates"] == aggs
    assert state["knee"] == sp.find_knee(aggs, "target_qps") and state["max_valid"] == sp.max_valid(aggs)
    assert "highest VALID" in run.stdout and "knee" in run.stdout

    # --constraints: every point on the node that offers acc_b; --resume measures only what is missing
    out2 = tmp_path / "sweep-b"
    args = sweep_args(tmp_path, out2, "--qps", "20,30", "--cluster", "auto", "--constraints", "accelerator=acc_b")
    placed = cli(env, *args)
    assert placed.returncode == 0, placed.stdout + placed.stderr
    points = json.loads((out2 / "sweep.json").read_text())["points"]
    assert {p["node"]["node_id"] for p in points} == {ray_cluster.node_id("b")}
    before = (out2 / points[0]["dir"] / "mlperf_log_detail.txt").stat().st_mtime_ns
    again = cli(env, *args, "--resume")
    assert again.returncode == 0 and "0 point(s)" in again.stderr, again.stderr
    assert (out2 / points[0]["dir"] / "mlperf_log_detail.txt").stat().st_mtime_ns == before


@pytest.mark.parametrize(("extra", "reason"), [
    (("--min-qps", "10", "--max-qps", "80"), "adaptive plan chooses each value from the points measured before"),
    (("--qps", "10,20", "--endpoint", "http://127.0.0.1:9/v1"), "every point measures the same endpoint"),
    (("--session-rates", "1,2", "--replay", "trace.jsonl"), "every point replays the trace"),
    (("--qps", "10,20", "--constraints", "accelerator=acc_a"), "--constraints picks nodes of a cluster: give "
                                                                "--cluster"),
])
def test_what_cannot_be_spread_is_refused_with_the_reason(tmp_path, extra, reason):
    out = tmp_path / "sweep"
    cluster = () if "--constraints" in extra else ("--cluster", "local")
    run = cli(dict(os.environ), *sweep_args(tmp_path, out, *extra, *cluster), timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    assert reason in " ".join(run.stderr.split()), run.stderr
    assert not out.exists()  # refused before anything is written
