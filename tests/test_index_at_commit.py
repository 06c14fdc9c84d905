"""Every run is in the evaluation database of its results root the moment its folder is committed: a single run,
a sweep point and a submission's LoadGen tests are listed by ``results list --no-index`` (no index step). A
database that cannot be written leaves the run good (exit 0) and says once, on stderr, that ``mlharness results
index ROOT`` adds the row later; a failed run writes nothing into it, and a run written outside the results root
does not touch its database."""

from __future__ import annotations

import csv
import io

from mlharness import cli
from mlharness.paths import MANIFESTS_DIR
from mlharness.results_db.db import DB_FILE
from tests.helpers.ray_cluster import toy_manifest

RUN = ["run", "--scenario", "Offline", "--mode", "accuracy", "--count", "4", "--no-progress",
       "--telemetry-interval-ms", "0"]
NOTICE = "`mlharness results index results` adds it later"


def listed(capsys, root: str = "results") -> list[dict[str, str]]:
    """The rows ``results list ROOT --csv --no-index`` prints: what the database holds, no index step first."""
    capsys.readouterr()
    assert cli.main(["results", "list", root, "--csv", "--no-index"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_a_run_is_listed_without_an_index_step(here, capsys):
    assert cli.main(RUN) == 0
    assert NOTICE not in capsys.readouterr().err
    assert (here / "results" / DB_FILE).is_file()
    rows = listed(capsys)
    assert [(r["folder"], r["kind"], r["mode"], r["root"]) for r in rows] == [
        ("default/demo/Offline/accuracy", "run", "accuracy", str((here / "results").resolve()))]
    # --output outside the results root: no root's database would find it, so none is written
    assert cli.main([*RUN, "--output", "elsewhere", "--results-root", "other"]) == 0
    assert (here / "elsewhere" / "mlharness_run.json").is_file() and not (here / "other").exists()
    assert not (here / "elsewhere" / DB_FILE).exists()
    # --output inside it is found: the root's database gets it
    assert cli.main([*RUN, "--mode", "performance", "--min-duration-ms", "100", "--output",
                     "results/mine/perf"]) == 0
    assert sorted(r["folder"] for r in listed(capsys)) == ["default/demo/Offline/accuracy", "mine/perf"]


def test_a_database_that_cannot_be_written_leaves_the_run_good_and_says_so_once(here, capsys):
    (here / "results").mkdir()
    (here / "results" / DB_FILE).write_bytes(b"not an SQLite database\n" * 200)  # corrupt
    assert cli.main(RUN) == 0
    err = capsys.readouterr().err
    assert err.count(NOTICE) == 1 and "was not written to the evaluation database" in err, err
    assert (here / "results/default/demo/Offline/accuracy/mlperf_log_accuracy.json").is_file()
    assert "Traceback" not in err


def test_a_failed_run_writes_nothing_into_the_database(here, run_cli):
    text = (MANIFESTS_DIR / "demo" / "demo.yaml").read_text()
    old = "  def postprocess(ctx, outputs):\n"
    assert text.count(old) == 1
    (here / "failing.yaml").write_text(text.replace(old, old + "      raise ValueError('boom on purpose')\n"))
    r = run_cli(*RUN, "--manifest", "failing.yaml", cwd=here)
    assert r.returncode == 3, r.stdout + r.stderr
    assert list((here / "results/default/demo/Offline").glob("accuracy.failed-*"))
    assert not (here / "results" / DB_FILE).exists(), "a failed run indexed its results root"


def test_a_sweep_point_is_listed_without_an_index_step(here, capsys):
    (here / "toy.yaml").write_text(toy_manifest("toy"))
    assert cli.main(["sweep", "--manifest", "toy.yaml", "--count", "16", "--min-duration-ms", "300",
                     "--min-query-count", "20", "--qps", "50", "--no-progress", "--output", "results/sw"]) == 0
    rows = listed(capsys)
    assert [(r["folder"], r["kind"], r["scenario"]) for r in rows] == [
        ("sw/points/qps-000050.000-r1", "sweep_point", "Server")]


def test_a_submissions_runs_are_listed_without_an_index_step(here, capsys):
    assert cli.main(["submission", "run", "--manifest", "demo", "--scenarios", "Offline", "--division", "open",
                     "--submitter", "ORG", "--results", "sub", "--count", "32", "--min-duration-ms", "300"]) == 0
    rows = listed(capsys, "sub")
    assert sorted((r["folder"], r["kind"]) for r in rows) == [
        ("default/demo/Offline/TEST01/performance/run_1", "submission"),
        ("default/demo/Offline/accuracy", "submission"),
        ("default/demo/Offline/performance/run_1", "submission")]
    assert {r["compliance_test"] for r in rows} == {"TEST01", ""}
