"""The evaluation database under faults seen in use: two first indexes of a new root at once, a database file
that cannot be written (immutable) or is a device, a node id given as the tables print it (12 characters), and
``results list --csv``. Real runs (the demo model), real SQLite files; every subprocess bounded."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NODE = "3f2a9c7be1d04c55a8e6f0b2c9d1e7a4b5c6d7e8f9a0b1c2d3e4f5a6"  # a Ray node id: 56 hex digits


def cli(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture(scope="module")
def one_run(tmp_path_factory, env) -> Path:
    """One demo run (Offline performance, 16 samples, 100 ms) as an executor runs it on a node."""
    root = tmp_path_factory.mktemp("results")
    node = {**env, "MLHARNESS_EXECUTOR": "local", "MLHARNESS_NODE_ID": NODE, "MLHARNESS_NODE_ADDRESS": "10.0.0.7"}
    proc = cli(node, "run", "--manifest", "demo", "--scenario", "Offline", "--mode", "performance", "--count", "16",
               "--min-duration-ms", "100", "--no-progress", "--telemetry-interval-ms", "0",
               "--output", str(root / "sysA/demo/Offline/performance"))
    assert proc.returncode == 0, proc.stderr
    return root / "sysA/demo/Offline/performance"


def tree(tmp_path: Path, run: Path, copies: int) -> Path:
    root = tmp_path / "results"
    for i in range(copies):
        shutil.copytree(run, root / f"sys{i}/demo/Offline/performance")
    return root


def test_two_first_indexes_of_a_new_root_at_once_both_succeed(env, one_run, tmp_path):
    """Both make the schema and index at the same moment: neither fails (alembic_version already exists, a
    locked database, a row added twice), and every folder is indexed once."""
    for attempt in range(3):  # the race is a matter of milliseconds: three fresh roots, three indexers each
        root = tree(tmp_path / str(attempt), one_run, 6)
        procs = [subprocess.Popen([sys.executable, "-m", "mlharness.cli", "results", "index", str(root)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(3)]
        try:
            outs = [p.communicate(timeout=120) for p in procs]
        finally:
            for p in procs:
                p.kill()
                p.wait()
        assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
        rows = json.loads(cli(env, "results", "list", str(root), "--json", "--no-index").stdout)
        assert sorted(r["folder"] for r in rows) == [f"sys{i}/demo/Offline/performance" for i in range(6)]


def test_an_immutable_database_file_is_one_line_naming_it(env, one_run, tmp_path):
    root = tree(tmp_path, one_run, 1)
    assert cli(env, "results", "index", str(root)).returncode == 0
    shutil.copytree(one_run, root / "sysB/demo/Offline/performance")  # something to write on the next query
    db = root / "mlharness_results.sqlite"
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs CAP_LINUX_IMMUTABLE")
    try:
        r = cli(env, "results", "list", str(root))
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert r.returncode == 2, r.stderr
    assert str(db) in r.stderr and "immutable" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_database_path_that_is_a_device_is_one_line_naming_it(env, one_run, tmp_path, device):
    root = tree(tmp_path, one_run, 1)
    (root / "mlharness_results.sqlite").symlink_to(device)
    r = cli(env, "results", "list", str(root))
    assert r.returncode == 2, r.stderr
    assert "mlharness_results.sqlite" in r.stderr and "character device" in r.stderr, r.stderr
    assert "disk I/O error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_node_id_as_the_table_prints_it_selects_its_runs(env, one_run, tmp_path):
    root = tree(tmp_path, one_run, 2)
    table = cli(env, "results", "list", str(root))
    assert table.returncode == 0 and NODE[:12] in table.stdout, table.stderr
    for given in (NODE[:12], NODE):
        rows = json.loads(cli(env, "results", "list", str(root), "--node", given, "--json").stdout)
        assert len(rows) == 2 and {r["node_id"] for r in rows} == {NODE}, given
    assert json.loads(cli(env, "results", "list", str(root), "--node", "3f2a%", "--json").stdout) == []


def test_results_list_csv_has_every_run_and_column(env, one_run, tmp_path):
    root = tree(tmp_path, one_run, 2)
    r = cli(env, "results", "list", str(root), "--csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    as_json = json.loads(cli(env, "results", "list", str(root), "--json").stdout)
    assert [row["folder"] for row in rows] == [j["folder"] for j in as_json]
    assert rows[0]["node_id"] == NODE and rows[0]["mode"] == "performance" and "metric_value" in rows[0]
