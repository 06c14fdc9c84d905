"""Campaigns: a YAML file of models × scenarios × modes × systems run as real `mlharness` processes, on a Ray
cluster of three nodes on this host (tests/helpers/ray_cluster.py: node a offers acc_a, b acc_b, c neither).

"On each matching node" gives one result per node, which `report` shows side by side with each node's facts; a
node killed mid-campaign loses nothing that finished; `--resume` redoes nothing that finished (mtimes); a
malformed file exits 2 naming the line and field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.ray_cluster import ray_cluster, start_cluster, toy_manifest  # noqa: F401 - the fixture


def write_campaign(folder: Path, systems: str, scenarios: str = "[Offline]", duration_ms: int = 200) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sleepy.yaml").write_text(toy_manifest("sleepy", sleep_ms=5))
    path = folder / "campaign.yaml"
    path.write_text(f"models: [sleepy.yaml]\nscenarios: {scenarios}\nmodes: [performance]\n"
                    f"options: {{min_duration_ms: {duration_ms}, min_query_count: 1, count: 16}}\n"
                    f"systems:\n{systems}")
    return path


def cli(env: dict[str, str], *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def mtimes(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("mlharness_run.json")}


def record(root: Path) -> dict[str, dict]:
    return {e["key"]: e for e in json.loads((root / "campaign.json").read_text())["jobs"]}


def test_a_malformed_campaign_exits_2_naming_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("models: [demo]\nscenarios: [Offline]\nsystems:\n  - name: gpu\n    min_memroy_gb: 32\n")
    run = cli(dict(os.environ), "campaign", "plan", str(path), timeout=60)
    assert run.returncode == 2, run.stderr
    assert "line 5" in run.stderr and "systems[0].min_memroy_gb" in run.stderr and "min_memory_gb" in run.stderr
    path.write_text("models: [demo]\nscenarios: [Offline]\nmodes: [performance, speed]\n")
    run = cli(dict(os.environ), "campaign", "run", str(path), "--results", str(tmp_path / "r"), timeout=60)
    assert run.returncode == 2 and "line 3" in run.stderr and "modes[1]" in run.stderr, run.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_each_matching_node_gives_one_result_side_by_side_and_resume_redoes_nothing(ray_cluster, tmp_path):  # noqa: F811
    env = ray_cluster.env(dict(os.environ))
    path = write_campaign(tmp_path, "  - {name: all, on: each}\n  - {name: b, accelerator: acc_b}\n")
    root = tmp_path / "results"
    run = cli(env, "campaign", "run", str(path), "--cluster", "auto", "--results", str(root))
    assert run.returncode == 0, run.stdout + run.stderr
    jobs = record(root)
    each = {k: e for k, e in jobs.items() if e["system"] == "all"}
    ids = {ray_cluster.node_id(n) for n in ("a", "b", "c")}
    assert {e["node"]["node_id"] for e in each.values()} == ids  # one result per node
    for key, entry in jobs.items():
        md = json.loads((root / entry["dest"] / "mlharness_run.json").read_text())
        assert md["executor"]["node_id"] == entry["node"]["node_id"]  # the run names the node that ran it
        if entry["system"] == "all":
            assert key.startswith(f"all@{entry['node']['node_id'][:12]}/")
    assert jobs["b/sleepy/Offline/performance"]["node"]["node_id"] == ray_cluster.node_id("b")

    report = cli(env, "report", str(root), "--md", str(tmp_path / "r.md"), timeout=60)
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "r.md").read_text()
    side = md[md.index("## Systems side by side"):].splitlines()
    rows = [line for line in side if line.startswith("| all@")]
    assert len(rows) == 3 and all("VALID" in r and "samples/s" in r for r in rows)
    assert any("acc_a" in r for r in rows) and any("acc_b" in r for r in rows)
    assert "systems side by side" in report.stdout

    before = mtimes(root)
    assert len(before) == 4
    again = cli(env, "campaign", "run", str(path), "--cluster", "auto", "--results", str(root))
    assert again.returncode == 2 and "--resume" in again.stderr  # never over finished results
    resumed = cli(env, "campaign", "run", str(path), "--cluster", "auto", "--results", str(root), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "0 run(s), 4 skipped" in resumed.stdout
    assert mtimes(root) == before
    assert all(e["outcome"] == "skipped" and e["node"] for e in record(root).values())


@pytest.mark.slow
def test_a_node_killed_mid_campaign_loses_nothing_finished_and_resume_completes_it(tmp_path):
    cluster = start_cluster()
    try:
        env = cluster.env(dict(os.environ))
        path = write_campaign(tmp_path, "  - {name: any}\n", "[Offline, SingleStream, MultiStream, Server]", 2500)
        root = tmp_path / "results"
        proc = subprocess.Popen([sys.executable, "-m", "mlharness.cli", "campaign", "run", str(path), "--cluster",
                                 "auto", "--results", str(root)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 90
            while not mtimes(root) and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
            finished = mtimes(root)
            assert finished, "no run finished within 90 s"
            cluster.kill("b")
            out, err = proc.communicate(timeout=150)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode in (0, 3), out + err
        after = mtimes(root)
        assert all(after.get(k) == v for k, v in finished.items())  # nothing finished is lost or redone
        jobs = record(root)
        for entry in jobs.values():
            if entry["outcome"] == "ok":
                assert (root / entry["dest"] / "mlharness_run.json").is_file()
            else:  # reported, naming the node it was on
                assert entry["outcome"] == "failed" and "node" in entry["error"], entry
        assert proc.returncode == 0 or "--resume" in err
        before = mtimes(root)
        resumed = cli(env, "campaign", "run", str(path), "--cluster", "auto", "--results", str(root), "--resume")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert all(mtimes(root)[k] == v for k, v in before.items())
        assert all(e["outcome"] in ("ok", "skipped") for e in record(root).values())
        assert len(mtimes(root)) == 4
    finally:
        cluster.shutdown()


@pytest.mark.parametrize("bad", ["accelerator: 3\n    on: some", "frameworks: {onnxruntime: '>>1'}"])
def test_a_system_field_of_the_wrong_kind_is_named(tmp_path, bad):
    path = tmp_path / "c.yaml"
    path.write_text(f"models: [demo]\nscenarios: [Offline]\nsystems:\n  - name: x\n    {bad}\n")
    run = cli(dict(os.environ), "campaign", "plan", str(path), timeout=60)
    assert run.returncode == 2 and "systems[0]." in run.stderr and "line 5" in run.stderr, run.stderr
