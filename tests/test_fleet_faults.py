"""Faults of the cluster layer on a shared host: servers that accept a connection and never answer, and another
job's Ray head on the same machine. Loopback only; every subprocess is bounded; no Ray process is started."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")


@pytest.fixture
def silent_port():
    """A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def mlharness(env: dict[str, str], *args: str, timeout: float = 15) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    return r, time.monotonic() - start


@pytest.fixture
def env(tmp_path, shared_cache):
    """Ray's temp folder and mlharness's state folder in tmp_path; no RAY_ADDRESS; a 1 s connect timeout."""
    e = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    e.update(MLHARNESS_CACHE=str(shared_cache), RAY_TMPDIR=str(tmp_path / "raytmp"),
             XDG_STATE_HOME=str(tmp_path / "state"), MLHARNESS_CONNECT_TIMEOUT="1")
    (tmp_path / "raytmp").mkdir()
    return e


@pytest.mark.parametrize("form", ["ray://127.0.0.1:{port}", "127.0.0.1:{port}"])
def test_a_ray_address_that_never_answers_is_one_line_exit_2(env, silent_port, form):
    address = form.format(port=silent_port)
    r, took = mlharness(env, "cluster", "nodes", "--cluster", address)
    assert r.returncode == 2, r.stderr
    assert f"127.0.0.1:{silent_port} did not answer within 1 s" in r.stderr, r.stderr
    assert "MLHARNESS_CONNECT_TIMEOUT" in r.stderr and "Traceback" not in r.stderr
    assert took < 15


def test_a_database_server_that_never_answers_is_one_line_exit_2(env, silent_port, tmp_path):
    """PostgreSQL's connect has the same bound: a server that accepts and never speaks ends the command."""
    pytest.importorskip("psycopg")
    (tmp_path / "results").mkdir()
    r, took = mlharness(env, "results", "list", str(tmp_path / "results"), "--db",
                        f"postgresql+psycopg://u@127.0.0.1:{silent_port}/results")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"127.0.0.1:{silent_port}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert took < 15


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_the_connect_timeout_is_a_finite_positive_number(env, silent_port, value):
    env["MLHARNESS_CONNECT_TIMEOUT"] = value
    r, _ = mlharness(env, "cluster", "nodes", "--cluster", f"ray://127.0.0.1:{silent_port}")
    assert r.returncode == 2 and "MLHARNESS_CONNECT_TIMEOUT" in r.stderr and "greater than 0" in r.stderr, r.stderr


def test_auto_never_joins_another_jobs_head(env, tmp_path, silent_port):
    """Ray's address file names a head mlharness did not start (here one that never answers, as a stuck head
    would): ``--cluster auto`` leaves it alone, runs on this machine and says so, naming it."""
    (tmp_path / "raytmp" / "ray").mkdir()
    (tmp_path / "raytmp" / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{silent_port}\n")
    r, took = mlharness(env, "cluster", "nodes", "--cluster", "auto", "--json", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "local executor" in r.stderr and f"127.0.0.1:{silent_port}" in r.stderr and "left alone" in r.stderr
    import json

    nodes = json.loads(r.stdout)
    assert len(nodes) == 1 and nodes[0]["node_id"] != "" and took < 60


def test_auto_joins_the_cluster_mlharness_cluster_start_recorded(env, tmp_path, silent_port):
    """The record of ``mlharness cluster start`` is what ``auto`` joins (here a head that stopped answering:
    named, exit 2, no wait for ever)."""
    from mlharness.cluster.head import RECORD_NAME

    state = tmp_path / "state" / "mlharness"
    state.mkdir(parents=True)
    (state / RECORD_NAME).write_text(f'{{"address": "127.0.0.1:{silent_port}", "uid": {os.getuid()}}}\n')
    r, _ = mlharness(env, "cluster", "nodes", "--cluster", "auto")
    assert r.returncode == 2 and f"GCS at 127.0.0.1:{silent_port} did not answer" in r.stderr, r.stderr


def test_ray_address_env_is_joined_by_auto(env, silent_port):
    env["RAY_ADDRESS"] = f"127.0.0.1:{silent_port}"
    r, _ = mlharness(env, "cluster", "nodes", "--cluster", "auto")
    assert r.returncode == 2 and f"127.0.0.1:{silent_port} did not answer" in r.stderr, r.stderr


def test_a_recorded_cluster_record_that_is_a_fifo_is_refused(env, tmp_path):
    state = tmp_path / "state" / "mlharness"
    state.mkdir(parents=True)
    os.mkfifo(state / "ray_cluster.json")
    r, _ = mlharness(env, "cluster", "nodes", "--cluster", "auto")
    assert r.returncode == 2 and "ray_cluster.json" in r.stderr and "FIFO" in r.stderr.upper(), r.stderr


def campaign(tmp_path: Path, scenarios: str, options: str) -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(f"models: [demo]\nscenarios: {scenarios}\nmodes: [performance]\noptions: {options}\n")
    return path


def test_an_option_a_scenario_refuses_is_refused_at_plan_naming_it(env, tmp_path):
    path = campaign(tmp_path, "[Offline, SingleStream]", "{target_qps: 100, min_duration_ms: 100}")
    r, _ = mlharness(env, "campaign", "plan", str(path), timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "options.target_qps" in r.stderr and "SingleStream" in r.stderr and "line 4" in r.stderr, r.stderr
    ok, _ = mlharness(env, "campaign", "plan", str(campaign(tmp_path, "[Offline, Server]", "{target_qps: 100}")),
                      timeout=60)
    assert ok.returncode == 0, ok.stderr


def test_a_campaigns_runs_are_in_the_evaluation_database_when_they_land(env, tmp_path):
    """No `results` query first: the database at the results root holds each run as soon as it landed."""
    import json

    path = campaign(tmp_path, "[Offline]", "{min_duration_ms: 100, min_query_count: 1, count: 16}")
    root = tmp_path / "results"
    r, _ = mlharness(env, "campaign", "run", str(path), "--results", str(root), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (root / "mlharness_results.sqlite").is_file()
    listed, _ = mlharness(env, "results", "list", str(root), "--no-index", "--json", timeout=60)
    rows = json.loads(listed.stdout)
    assert [row["folder"] for row in rows] == ["default/demo/Offline/performance"], listed.stderr
    assert rows[0]["kind"] == "campaign_job"


def test_records_name_the_users_manifest_and_resume_refuses_changed_options(env, tmp_path):
    """A shipped manifest's run records the user's file (not the node's temporary copy) with its digest; a resume
    whose options differ from those of the finished runs is refused naming them, and kept only when asked."""
    import json
    import shutil

    from mlharness.manifest.loader import find_builtin

    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(find_builtin("demo"), mine / "demo.yaml")
    root = tmp_path / "results"

    def write(count: int) -> Path:
        path = tmp_path / "campaign.yaml"
        path.write_text(f"models: [mine/demo.yaml]\nscenarios: [Offline]\nmodes: [performance]\n"
                        f"options: {{min_duration_ms: 100, min_query_count: 1, count: {count}}}\n")
        return path

    r, _ = mlharness(env, "campaign", "run", str(write(16)), "--results", str(root), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    key = "default/demo/Offline/performance"
    meta = json.loads((root / key / "mlharness_run.json").read_text())
    assert meta["manifest"]["path"] == str((mine / "demo.yaml").resolve())
    assert meta["manifest"]["shipped_as"] != meta["manifest"]["path"]
    entry = {e["key"]: e for e in json.loads((root / "campaign.json").read_text())["jobs"]}[key]
    assert entry["manifest"]["sha256"] == meta["manifest"]["sha256"]
    assert "--count" in entry["options"]
    before = (root / key / "mlharness_run.json").stat().st_mtime_ns

    refused, _ = mlharness(env, "campaign", "run", str(write(8)), "--results", str(root), "--resume", timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert key in refused.stderr and "--count 16" in refused.stderr and "--accept-changed" in refused.stderr
    kept, _ = mlharness(env, "campaign", "run", str(write(8)), "--results", str(root), "--resume",
                        "--accept-changed", timeout=120)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert (root / key / "mlharness_run.json").stat().st_mtime_ns == before
