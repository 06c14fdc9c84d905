"""``submission package`` and ``submission check`` on hostile and incomplete trees, through the real CLI: a hard
link to a file outside the tree, a FIFO, a socket or a device node in a run folder, an interrupted run, and file
names that would forge a line of the check's report are refused or escaped, with one error paragraph (exit 2),
never a traceback or a hang, and an earlier package left byte for byte as it was. Also the official checker's
minimum Offline query of a closed result (its OFFLINE_MIN_SPQ_SINCE_V4), with its words.

The trees are hand-made LoadGen logs (tests.helpers.loadgen_logs): each test takes about a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mlharness.rounds import DEFAULT_ROUND, ROUNDS
from mlharness.submission.layout import Tree
from mlharness.submission.rules import SYSTEM_DESC_REQUIRED_FIELDS
from tests.helpers.loadgen_logs import write_run
from tests.helpers.unix_socket import socket_file

SEEDS = {f"effective_{k}": v for k, v in ROUNDS[DEFAULT_ROUND].seeds.items()}
FIXTURES = Path(__file__).parent / "fixtures" / "submission_spq"


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def scenario_runs(scen: Path, scenario: str) -> None:
    """A scenario folder as `submission run` leaves it: complete accuracy and performance runs."""
    acc = scen / "accuracy"
    write_run(acc, scenario, 1.0, effective_test_mode="AccuracyOnly")
    (acc / "mlperf_log_accuracy.json").write_text("[]\n")
    (acc / "accuracy.txt").write_text("accuracy=100.000%, good=8, total=8\n")
    write_run(scen / "performance" / "run_1", scenario, 1.0, **SEEDS)
    for name in ("README.md", "user.conf"):
        (scen / name).write_text("x\n")


def results_tree(root: Path, scenarios: tuple[str, ...] = ("Offline",)) -> Tree:
    """A results tree of the open division (system b, benchmark demo); short names keep a socket's path under
    the 108 bytes AF_UNIX allows."""
    tree = Tree(root)
    tree.write_state({"division": "open", "submitter": "Acme", "benchmarks": {},
                      "systems": {"b": {"fields": {"system_name": "b"}, "sources": {}}}})
    for scenario in scenarios:
        scenario_runs(tree.scenario_dir("b", "demo", scenario), scenario)
    return tree


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def package(tree: Tree, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return cli("submission", "package", "--results", str(tree.root), "--out", str(out), *extra)


def refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert "Traceback" not in text and text.count("error:") == 1, text[-3000:]
    for word in words:
        assert word in " ".join(text.split()), (word, text[-3000:])  # rich may wrap the paragraph
    return text


@pytest.fixture
def tree(tmp_path) -> Tree:
    return results_tree(tmp_path / "r")


@pytest.fixture
def good(tree, tmp_path) -> tuple[Path, dict[str, str]]:
    """An earlier, good package of the tree, and its files' hashes."""
    out = tmp_path / "p"
    proc = package(tree, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, snapshot(out)


def test_the_hand_made_tree_packages(good):
    out, files = good
    assert "open/Acme/results/b/demo/Offline/performance/run_1/mlperf_log_detail.txt" in files


def test_a_hard_link_to_a_file_outside_the_tree_is_refused(tree, good, tmp_path):
    out, before = good
    outside = tmp_path / "secret.txt"
    outside.write_text("not a result\n")
    linked = tree.scenario_dir("b", "demo", "Offline") / "README.md"
    linked.unlink()
    os.link(outside, linked)
    refused(package(tree, out, "--force"), str(linked), "is a hard link", "outside the tree")
    assert snapshot(out) == before  # --force replaced nothing


def test_hard_links_within_the_tree_are_fine(tree, tmp_path):
    # submission run links each audit's logs into its record folder in the archive
    detail = tree.scenario_dir("b", "demo", "Offline") / "performance" / "run_1" / "mlperf_log_detail.txt"
    record = tree.record_dir("b", "demo", "Offline", "performance")
    record.mkdir(parents=True)
    os.link(detail, record / "mlperf_log_detail.txt")
    proc = package(tree, tmp_path / "p")
    assert proc.returncode == 0, proc.stderr[-3000:]


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    socket_file(path)


def _device(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # the null device, inside tmp_path


@pytest.mark.parametrize("make, kind", [(_fifo, "a FIFO"), (_socket, "a socket"), (_device, "a character device")])
def test_a_special_file_in_a_run_folder_is_refused_before_anything_is_written(tree, good, make, kind):
    out, before = good
    odd = tree.scenario_dir("b", "demo", "Offline") / "performance" / "run_1" / "s"
    make(odd)
    text = refused(package(tree, out, "--force"), str(odd), f"is {kind}, not a regular file", "Nothing was packaged")
    assert "shutil.Error" not in text
    assert snapshot(out) == before
    assert not [p for p in out.rglob(".*partial*")]


def test_a_fifo_refusal_into_a_new_folder_writes_nothing(tree, tmp_path):
    odd = tree.scenario_dir("b", "demo", "Offline") / "accuracy" / "mlperf_log_accuracy.json"
    odd.unlink()
    os.mkfifo(odd)
    refused(package(tree, tmp_path / "new"), str(odd), "is a FIFO")
    assert not (tmp_path / "new").exists() and not (tmp_path / "new-accuracy-logs").exists()


def test_a_symlinked_package_folder_is_not_replaced_by_force(tree, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("keep\n")
    (tmp_path / "p" / "open").mkdir(parents=True)
    (tmp_path / "p" / "open" / "Acme").symlink_to(target)
    refused(package(tree, tmp_path / "p", "--force"), "not a package folder")
    assert (target / "keep.txt").read_text() == "keep\n"


def test_an_interrupted_server_run_is_refused(tmp_path):
    """An interrupted run leaves its partial output beside the final folder (run_1.failed-<time>); package
    moves it out of the tree, and the scenario then has no performance run for the checker to read."""
    tree = results_tree(tmp_path / "r", ("Offline", "Server"))
    good = tmp_path / "p"
    assert package(tree, good).returncode == 0
    before = snapshot(good)
    run = tree.scenario_dir("b", "demo", "Server") / "performance" / "run_1"
    run.rename(run.with_name("run_1.failed-20260101-000000"))
    refused(package(tree, good, "--force"), "1 run folder(s)", "b/demo/Server/performance/run_1: the folder is "
            "missing", "Nothing was packaged")
    assert snapshot(good) == before
    # a run folder whose logs stop before the result lines
    write_run(run, "Server", 1.0, **SEEDS)
    detail = run / "mlperf_log_detail.txt"
    detail.write_text("".join(line + "\n" for line in detail.read_text().splitlines() if "result_validity" not in line))
    (run / "mlperf_log_summary.txt").write_text("MLPerf Results Summary\nScenario : Server\n")
    refused(package(tree, good, "--force"), "b/demo/Server/performance/run_1:",
            "mlperf_log_summary.txt is cut short", "mlperf_log_detail.txt has no result (no 'result_validity' line)")
    (run / "mlperf_log_summary.txt").unlink()
    refused(package(tree, good, "--force"), "b/demo/Server/performance/run_1: no mlperf_log_summary.txt")
    assert snapshot(good) == before


@pytest.mark.parametrize("state, field", [("[]", "not an object"), ('{"division": "closed", "submitter": "../x"}',
                                                                     "field 'submitter'")])
def test_a_wrong_state_file_is_refused(tree, tmp_path, state, field):
    (tree.archive / "submission.json").write_text(state)
    refused(package(tree, tmp_path / "p"), "submission.json", field)


def test_a_fifo_as_the_state_file_is_refused(tree, tmp_path):
    (tree.archive / "submission.json").unlink()
    os.mkfifo(tree.archive / "submission.json")
    refused(package(tree, tmp_path / "p"), "submission.json", "is a FIFO")


# -------------------------------------------------------------------------------------------------- check
def test_check_prints_names_escaped(good):
    out, _ = good
    scen = out / "open" / "Acme" / "results" / "b" / "demo" / "Offline"
    (scen / "x\nERROR forged: all good").write_text("x")
    (scen / "y\x1b[2Jz").write_text("x")
    proc = cli("submission", "check", str(out), "--allow-development")
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and proc.returncode == 2, text[-3000:]
    assert not any(line.startswith("ERROR forged") for line in text.splitlines())
    assert "x\\nERROR forged: all good" in text and "y\\x1b[2Jz" in text
    assert "\x1b" not in text


def test_check_names_a_fifo_without_reading_it(good):
    out, _ = good
    detail = out / "open" / "Acme" / "results" / "b" / "demo" / "Offline" / "performance" / "run_1" / \
        "mlperf_log_detail.txt"
    detail.unlink()
    os.mkfifo(detail)
    proc = cli("submission", "check", str(out), "--allow-development", timeout=60)
    assert proc.returncode == 2 and "mlperf_log_detail.txt: is a FIFO, not a regular file" in proc.stdout, \
        proc.stdout[-3000:]


# ------------------------------------------------------------------- the official minimum Offline query (closed)
def gpt_oss_package(root: Path, samples_per_query: int) -> Path:
    """A closed gpt-oss-120b Offline package (hand-made logs) whose Offline query holds ``samples_per_query``."""
    sub = root / "closed" / "Acme"
    system = {k: "x" for k in SYSTEM_DESC_REQUIRED_FIELDS}
    system.update(division="closed", submitter="Acme", status="available", system_type="datacenter",
                  system_name="box", number_of_nodes=1)
    (sub / "systems").mkdir(parents=True)
    (sub / "systems" / "box.json").write_text(json.dumps(system))
    (sub / "src").mkdir()
    (sub / "src" / "README.md").write_text("x\n")
    scen = sub / "results" / "box" / "gpt-oss-120b" / "Offline"
    write_run(scen / "performance" / "run_1", "Offline", 5.0, **SEEDS, effective_min_duration_ms=600000,
              effective_samples_per_query=samples_per_query, effective_min_query_count=1,
              effective_performance_sample_count=4395, effective_sample_concatenate_permutation=True,
              requested_use_token_latencies=True, result_tokens_per_second=2500.0)
    acc = scen / "accuracy"
    write_run(acc, "Offline", 5.0, effective_test_mode="AccuracyOnly", effective_accuracy_sample_count=4395)
    (acc / "mlperf_log_accuracy.json").write_text("[]\n")
    (acc / "accuracy.txt").write_text("{'exact_match': 83.5, 'tokens_per_sample': 1000.0}\nhash=abc\n")
    for name in ("README.md", "user.conf"):
        (scen / name).write_text("x\n")
    (scen / "measurements.json").write_text(json.dumps(
        {k: "x" for k in ("input_data_types", "retraining", "starting_weights_filename", "weight_data_types",
                          "weight_transformations")}))
    return root


SPQ_DETAIL = "closed/Acme/results/box/gpt-oss-120b/Offline/performance/run_1/mlperf_log_detail.txt"


def test_check_reports_the_official_minimum_offline_query(tmp_path):
    official = (FIXTURES / "official_line.txt").read_text().strip()  # the official checker's line on this tree
    path, _, words = official.partition(" ")
    assert path == SPQ_DETAIL and words == ("Required minimum samples per query not met by user config, "
                                            "Expected=6396, Found=216")
    proc = cli("submission", "check", str(gpt_oss_package(tmp_path / "pkg", 216)))
    errors = [line for line in proc.stdout.splitlines() if line.startswith("ERROR ")]
    assert f"ERROR {path}: {words}" in errors, proc.stdout[-3000:]
    assert proc.returncode == 2
    proc = cli("submission", "check", str(gpt_oss_package(tmp_path / "enough", 6396)))
    assert "Required minimum samples per query" not in proc.stdout, proc.stdout[-3000:]


def test_the_minimum_offline_query_is_a_closed_division_rule(tmp_path):
    from mlharness.submission.checker import check

    root = gpt_oss_package(tmp_path / "pkg", 216)
    (root / "closed").rename(root / "open")
    system = root / "open" / "Acme" / "systems" / "box.json"
    system.write_text(system.read_text().replace('"closed"', '"open"'))
    assert not any("samples per query" in str(f) for f in check(root).findings)
    tolerated = check(gpt_oss_package(tmp_path / "dev", 216), allow_development=True)
    assert any("Expected=6396, Found=216 (tolerated: --allow-development)" in str(f) for f in tolerated.warnings)


def test_a_file_where_the_package_goes_fails_without_a_traceback(tree, tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "open").write_text("a file, not a folder\n")
    proc = package(tree, tmp_path / "p")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 3 and "Traceback" not in text and "cannot write the package" in text, text[-3000:]
    assert (tmp_path / "p" / "open").read_text() == "a file, not a folder\n"


def test_check_reads_a_sparse_json_file_within_its_bound(good):
    out, _ = good
    system = out / "open" / "Acme" / "systems" / "b.json"
    with open(system, "r+b") as f:
        f.truncate(1 << 40)  # a terabyte, sparse: never read
    proc = cli("submission", "check", str(out), "--allow-development")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in text, text[-3000:]
    assert "systems/b.json: is larger than 50 MiB" in " ".join(text.split()), text[-3000:]


def _official_checker() -> Path | None:
    repo = os.environ.get("MLHARNESS_INFERENCE_REPO")
    tool = Path(repo) / "tools" / "submission" if repo else None
    return tool if tool and (tool / "submission_checker" / "main.py").is_file() else None


@pytest.mark.skipif(_official_checker() is None, reason="MLHARNESS_INFERENCE_REPO names no mlcommons/inference "
                                                        "checkout")
def test_the_fixture_is_the_official_checkers_line(tmp_path):
    root = gpt_oss_package(tmp_path / "pkg", 216)
    proc = subprocess.run([sys.executable, "-m", "submission_checker.main", "--input", str(root), "--version",
                           DEFAULT_ROUND], capture_output=True, text=True, timeout=120, cwd=_official_checker())
    lines = [line.split("] ", 1)[-1].replace(f"{root}/", "") for line in (proc.stdout + proc.stderr).splitlines()
             if "samples per query" in line]
    assert lines == [(FIXTURES / "official_line.txt").read_text().strip()], proc.stderr[-3000:]


def test_package_notes_print_folder_names_as_they_are(tree, tmp_path):
    run = tree.scenario_dir("b", "demo", "Offline") / "performance"
    (run / "[bold]x\x1b[2J.failed-20260101-000000").mkdir()
    proc = package(tree, tmp_path / "p")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[bold]x\\x1b[2J.failed-20260101-000000" in proc.stdout and "\x1b" not in proc.stdout, proc.stdout
