"""The evaluation database over a results root of real runs: every ``mlharness results`` answer agrees with the
run folders (values read back with the run's own summary reader), best-per-system is direction aware and VALID
only, history follows the runs' start times, indexing is incremental (unchanged folders are not read, deleted
ones dropped), ``report``/``compare --query`` render what the same folders render, a bad query field exits 2
naming it, and the schema the models declare is the one the migrations build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import pytest

from mlharness.loadgen.logs import parse_summary

RUN = ("--count", "64", "--no-progress", "--telemetry-interval-ms", "0")
# Server runs at a fixed offered load: VALID within a second (enough queries for early stopping), and a higher
# load completes more samples per second, so the best of a system is known before the runs
SERVER = ("--scenario", "Server", "--mode", "performance", "--min-duration-ms", "400", "--min-query-count", "1000")
# too few queries for early stopping: INVALID
INVALID = ("--scenario", "Server", "--mode", "performance", "--min-duration-ms", "300", "--min-query-count", "16",
           "--target-qps", "100")


def cli(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture(scope="module")
def root(tmp_path_factory, env) -> Path:
    """Four demo Server runs over two systems (sysB's first placed by --system, the default layout; its second
    INVALID, run as an executor runs it on a node), one accuracy run, and a small submission tree (accuracy,
    performance, TEST01)."""
    root = tmp_path_factory.mktemp("results")
    runs = [
        (SERVER + ("--target-qps", "2000", "--output", str(root / "sysA/demo/Server/performance/run_1"))),
        (SERVER + ("--target-qps", "3000", "--output", str(root / "sysA/demo/Server/performance/run_2"))),
        (SERVER + ("--target-qps", "2500", "--system", "sysB", "--results-root", str(root))),
        ("--scenario", "Offline", "--mode", "accuracy", "--output", str(root / "sysA/demo/Offline/accuracy")),
        (INVALID + ("--output", str(root / "sysB/demo/Server/performance/run_2"))),
    ]
    # the last run as an executor starts it on a node (mlharness/cluster/local.py's environment)
    node = {**env, "MLHARNESS_EXECUTOR": "local", "MLHARNESS_NODE_ID": "node-7", "MLHARNESS_NODE_ADDRESS": "10.0.0.7"}
    for i, args in enumerate(runs):
        proc = cli(node if i == len(runs) - 1 else env, "run", *args, *RUN)
        assert proc.returncode == 0, proc.stderr
    proc = cli(env, "submission", "run", "--manifest", "demo", "--scenarios", "Offline", "--division", "open",
               "--submitter", "ORG", "--results", str(root / "sub"), "--count", "32", "--min-duration-ms", "300")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def mlharness(capsys, *args: str) -> tuple[int, str, str]:
    """The command line in this process (its parser and handlers as a subprocess runs them, without the
    interpreter's start-up): exit status, stdout, stderr."""
    from mlharness.cli import main

    capsys.readouterr()
    rc = main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def results(capsys, *args: str) -> list[dict]:
    rc, out, err = mlharness(capsys, "results", *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def summary_of(folder: Path, scenario: str):
    return parse_summary(folder / "mlperf_log_summary.txt", scenario)


def test_list_agrees_with_the_run_folders(root, capsys):
    rows = {r["folder"]: r for r in results(capsys, "list", str(root))}
    folders = sorted(p.parent.relative_to(root).as_posix() for p in root.rglob("mlperf_log_summary.txt")
                     if not any(part.startswith(".") for part in p.relative_to(root).parts))
    assert sorted(rows) == folders and len(folders) == 8
    assert (root / "mlharness_results.sqlite").is_file()
    for rel, r in rows.items():
        folder = root / rel
        meta_path = folder / "mlharness_run.json"
        if r["kind"] == "submission":  # the tree holds LoadGen's logs; the metadata is in the archive's record
            assert not meta_path.exists()
            step = rel.split("/")[4]
            meta_path = root / "sub/.mlharness/runs/default/demo/Offline" / step / "mlharness_run.json"
        meta = json.loads(meta_path.read_text())
        assert (r["benchmark"], r["scenario"], r["mode"]) == (meta["benchmark"], meta["scenario"], meta["mode"])
        assert r["framework"] == meta["framework"]["name"] and r["framework_version"] == meta["framework"]["version"]
        assert r["round"] == meta["round"] and r["loadgen_version"] == meta["loadgen_version"]
        assert r["manifest"] == meta["manifest"]["name"]
        if meta.get("executor"):  # the node the executor named, else the host the run saw
            assert (r["node_id"], r["host"], r["executor"]) == ("node-7", "10.0.0.7", "local")
        else:
            assert r["host"] == meta["host"]["hostname"] and r["node_id"] is None
        s = summary_of(folder, r["scenario"])
        if r["mode"] == "performance":
            assert r["validity"] == ("VALID" if s.valid else "INVALID")
            assert r["metric_name"] == s.metric_name and r["metric_value"] == s.metric_value
        else:
            assert r["validity"] == "n.a." and r["metric_value"] is None
            assert r["accuracy_value"] == meta["accuracy"]["value"]
        assert r["started_at"] <= r["finished_at"]
    kinds = {rel: r["kind"] for rel, r in rows.items()}
    assert kinds["sub/default/demo/Offline/TEST01/performance/run_1"] == "submission"
    assert rows["sub/default/demo/Offline/TEST01/performance/run_1"]["compliance_test"] == "TEST01"
    assert kinds["sysA/demo/Server/performance/run_1"] == "run"
    assert kinds["sysB/demo/Server/performance/run_2"] == "campaign_job"  # an executor ran it
    assert [r["folder"] for r in results(capsys, "list", str(root), "--node", "node-7")] == [
        "sysB/demo/Server/performance/run_2"]
    assert {r["system"] for r in rows.values()} == {"sysA", "sysB", "default"}
    assert [r["folder"] for r in results(capsys, "list", str(root), "--invalid")] == [
        "sysB/demo/Server/performance/run_2"]
    valid = results(capsys, "list", str(root), "--valid", "--system", "sysA,default")
    assert {r["folder"] for r in valid} == {
        "sysA/demo/Server/performance/run_1", "sysA/demo/Server/performance/run_2",
        "sub/default/demo/Offline/performance/run_1", "sub/default/demo/Offline/TEST01/performance/run_1"}


def test_metrics_table_holds_every_number_of_the_summary(root):
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from mlharness.results_db.db import open_db, sqlite_url
    from mlharness.results_db.models import Metric, Run

    engine = open_db(sqlite_url(root))
    with Session(engine) as s:
        run = s.scalars(select(Run).where(Run.folder == "sysA/demo/Server/performance/run_1")).one()
        stored = dict(s.execute(select(Metric.name, Metric.value).where(Metric.run_id == run.id)).all())
    engine.dispose()
    fields = summary_of(root / run.folder, "Server").fields
    assert stored["99.00 percentile latency (ns)"] == float(fields["99.00 percentile latency (ns)"])
    assert stored["Completed samples per second"] == float(fields["Completed samples per second"])
    numeric = {k for k, v in fields.items() if v.replace(".", "", 1).isdigit()}
    assert numeric <= set(stored), numeric - set(stored)


def test_best_per_system_is_the_best_valid_folder(root, capsys):
    best = {r["system"]: r for r in results(capsys, "best", str(root), "--benchmark", "demo", "--scenario", "Server")}
    assert set(best) == {"sysA", "sysB"}
    for system, row in best.items():
        candidates = []
        for folder in (root / system / "demo/Server/performance").iterdir():
            s = summary_of(folder, "Server")
            if s.valid:
                candidates.append((s.metric_value, folder.relative_to(root).as_posix()))
        assert row["folder"] == max(candidates)[1] and row["metric_value"] == max(candidates)[0]
    assert best["sysA"]["folder"] == "sysA/demo/Server/performance/run_2"  # 3000 offered beats 2000
    assert best["sysB"]["folder"] == "sysB/demo/Server/performance/run_1"  # the INVALID one is never best
    # a latency scenario's best is the lowest: the submission's Offline is throughput, sysA's SingleStream none
    offline = results(capsys, "best", str(root), "--scenario", "Offline")
    assert [r["folder"] for r in offline] == ["sub/default/demo/Offline/performance/run_1"]


def test_history_orders_by_start_time(root, capsys):
    points = results(capsys, "history", "p99", str(root), "--system", "sysA", "--scenario", "Server")
    assert [p["folder"] for p in points] == ["sysA/demo/Server/performance/run_1",
                                             "sysA/demo/Server/performance/run_2"]
    for p in points:
        assert p["value"] == float(summary_of(root / p["folder"], "Server").fields["99.00 percentile latency (ns)"])
    starts = [datetime.fromisoformat(p["started_at"]) for p in points]
    assert starts == sorted(starts)
    since = results(capsys, "list", str(root), "--since", points[1]["started_at"], "--system", "sysA",
                    "--scenario", "Server")
    assert [r["folder"] for r in since] == ["sysA/demo/Server/performance/run_2"]
    rc, _, err = mlharness(capsys, "results", "history", "p99.99", str(root))
    assert rc == 2 and "p99.99" in err and "p99.9" in err


def test_reindex_skips_unchanged_and_drops_deleted(root, capsys, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("mlharness_results.sqlite"))
    rc, first, _ = mlharness(capsys, "results", "index", str(copy))
    assert rc == 0 and "8 added, 0 updated, 0 unchanged, 0 removed" in first, first
    _, again, _ = mlharness(capsys, "results", "index", str(copy))
    assert "0 added, 0 updated, 8 unchanged, 0 removed" in again, again
    shutil.rmtree(copy / "sysB/demo/Server/performance/run_2")
    summary = copy / "sysA/demo/Server/performance/run_1/mlperf_log_summary.txt"
    os.utime(summary, ns=(summary.stat().st_atime_ns, summary.stat().st_mtime_ns + 10**9))
    _, third, _ = mlharness(capsys, "results", "index", str(copy))
    assert "0 added, 1 updated, 6 unchanged, 1 removed" in third, third
    assert [r["folder"] for r in results(capsys, "list", str(copy), "--invalid")] == []
    assert not list(root.rglob("*.sqlite-journal")) and not (copy / "sysA" / "mlharness_results.sqlite").exists()


def _md_rows(path: Path) -> list[list[str]]:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| run "))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")][1:])  # all but the folder's name
    return rows


def test_report_and_compare_with_a_query_render_as_the_folders(root, env, tmp_path):
    by_query, by_folder = tmp_path / "q.md", tmp_path / "f.md"
    proc = cli(env, "report", "--query", "system=sysA scenario=Server", str(root), "--md", str(by_query))
    assert proc.returncode == 0, proc.stderr
    proc = cli(env, "report", str(root / "sysA/demo/Server"), "--md", str(by_folder))
    assert proc.returncode == 0, proc.stderr
    assert _md_rows(by_query) == _md_rows(by_folder) and len(_md_rows(by_query)) == 2
    q = cli(env, "compare", "--json", "--query", "system=sysA scenario=Server", "--query",
            "system=sysB scenario=Server", str(root))
    f = cli(env, "compare", "--json", str(root / "sysA/demo/Server"), str(root / "sysB/demo/Server"))
    assert q.returncode == 0 and f.returncode == 0, q.stderr + f.stderr
    qd, fd = json.loads(q.stdout), json.loads(f.stdout)
    assert [p["metrics"] for p in qd["pairs"]] == [p["metrics"] for p in fd["pairs"]] and qd["pairs"]
    assert qd["speedup"] == fd["speedup"]


def test_a_bad_query_field_exits_2_naming_it(root, env, capsys):
    proc = cli(env, "report", "--query", "benchmrk=demo", str(root))
    assert proc.returncode == 2 and "'benchmrk'" in proc.stderr and "benchmark" in proc.stderr
    rc, _, err = mlharness(capsys, "compare", "--query", "scenario=Server", "--query", "sytem=sysB", str(root))
    assert rc == 2 and "'sytem'" in err
    rc, _, err = mlharness(capsys, "results", "list", str(root), "--since", "yesterday")
    assert rc == 2 and "yesterday" in err


def test_the_migrations_build_the_schema_the_models_declare(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from mlharness.results_db.db import open_db
    from mlharness.results_db.models import Base

    engine = open_db(f"sqlite:///{tmp_path / 'x.sqlite'}")
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert MigrationContext.configure(conn).get_current_revision() == HEAD
    engine.dispose()
    assert diff == []


# the newest migration's revision: the files are numbered as their revisions
HEAD = max(p.name[:4] for p in (Path(__file__).parents[1] / "mlharness" / "results_db" / "migrations" / "versions")
           .glob("[0-9][0-9][0-9][0-9]_*.py"))
PG_BIN = next((d for d in (Path("/usr/lib/postgresql/15/bin"), *sorted(Path("/usr/lib/postgresql").glob("*/bin")))
               if (d / "initdb").is_file()), None) if Path("/usr/lib/postgresql").is_dir() else None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres(tmp_path):
    """A PostgreSQL server of Debian's binaries, initialised in tmp_path, on 127.0.0.1 (a free port; its socket in
    tmp_path), run as the postgres user when the tests run as root (the server refuses root), stopped at the end."""
    import pwd

    if PG_BIN is None:
        pytest.skip("PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'mlharness[postgres]')")
    prefix: list[str] = []
    restore: list[tuple[Path, int]] = []
    base = tmp_path / "pg"
    base.mkdir()
    if os.getuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser to start the server as 'postgres'")
        prefix = [runuser, "-u", "postgres", "--"]
        os.chown(base, user.pw_uid, user.pw_gid)
        # the server's user must reach its folder: traversal (not listing) through tmp_path's parents, restored
        for d in (tmp_path, *tmp_path.parents):
            if d == Path(tempfile.gettempdir()):
                break
            mode = d.stat().st_mode & 0o7777
            if not mode & 0o001:
                restore.append((d, mode))
                d.chmod(mode | 0o001)
    data, port = base / "data", _free_port()

    def pg(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=timeout, cwd=base)

    try:
        proc = pg(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-locale",
                  "-E", "UTF8", "--no-sync")
        if proc.returncode != 0:
            pytest.skip(f"initdb failed: {proc.stderr[-400:]}")
        proc = pg(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(base / "server.log"), "-w", "-t", "20",
                  "-o", f"-h 127.0.0.1 -p {port} -k {base} -F", "start", timeout=40)
        if proc.returncode != 0:
            log = (base / "server.log").read_text()[-400:] if (base / "server.log").exists() else ""
            pytest.skip(f"the PostgreSQL server did not start: {proc.stderr[-300:]} {log}")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        if data.exists():
            pg(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "15", "stop", timeout=30)
        for d, mode in restore:
            d.chmod(mode)


def test_the_same_answers_from_postgresql(root, postgres, capsys):
    rc, out, err = mlharness(capsys, "results", "index", str(root), "--db", postgres)
    assert rc == 0 and "8 added" in out, out + err
    keep = lambda rows: [{k: v for k, v in r.items() if k not in ("id", "indexed_at")} for r in rows]  # noqa: E731
    for args in (("list",), ("list", "--valid", "--scenario", "Server"), ("best", "--scenario", "Server"),
                 ("history", "p99", "--system", "sysA"), ("list", "--since", "2000-01-01", "--node", "node-7")):
        embedded = results(capsys, args[0], *(("p99", str(root)) if args[0] == "history" else (str(root),)),
                           *args[1 + (args[0] == "history"):])
        served = results(capsys, *args, "--db", postgres)  # no root: the whole database
        assert keep(served) == keep(embedded) and embedded, args
    rc, out, _ = mlharness(capsys, "results", "upgrade", "--db", postgres)
    assert rc == 0 and f"revision {HEAD}" in out and "postgres@127.0.0.1" in out
    rc, _, err = mlharness(capsys, "results", "list", "--db", postgres.replace("postgres@", "nobody@"))
    assert rc == 2 and "nobody" in err
