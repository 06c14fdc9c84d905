"""What a result says of the round's rules and of the code that made it, through the commands users read it with:
a qwen3.6-27b oracle run LoadGen calls INVALID for early stopping alone records the round's verdict (VALID, the
waiver, LoadGen's own) and ``report``, ``results list --valid`` and ``history`` show it VALID with the waiver while an
ordinary INVALID run stays INVALID (a run recorded before the verdict was is judged the same); a run records the
checkout's commit, whether its package was changed, and the user's label; ``results history --by commit`` gives one
row per commit; a replay run's session figures are queryable and equal its ``sessions_summary.json``; ``submission
run`` refuses a metric that cannot score before any step starts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.session_server import ChatServer

from mlharness.kinds.sessions.synth import synthetic_agentic_trace
from mlharness.run.metadata import source_commit
from tests.helpers.cli import cli

pytest.importorskip("mlperf_loadgen")

QWEN = "qwen/SingleStream/performance"  # the oracle's performance run: INVALID for early stopping alone
DEMO = "demo/Server/performance"  # too few queries for early stopping, a benchmark whose round does not waive it
REPLAY = "replay"
LABEL = "baseline of the waiver"


@pytest.fixture(scope="module")
def root(tmp_path_factory, env) -> Path:
    root = tmp_path_factory.mktemp("verdicts")
    proc = cli({**env, "MLHARNESS_RUN_LABEL": LABEL}, "run", "--manifest", "qwen3.6-27b-oracle", "--scenario",
               "SingleStream", "--mode", "performance", "--min-duration-ms", "0", "--no-progress",
               "--output", str(root / QWEN), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = cli(env, "run", "--scenario", "Server", "--mode", "performance", "--min-duration-ms", "300",
               "--min-query-count", "16", "--target-qps", "100", "--count", "64", "--no-progress",
               "--telemetry-interval-ms", "0", "--output", str(root / DEMO), timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trace = synthetic_agentic_trace(root.parent / f"{root.name}-trace.jsonl", sessions=3, turns=2)
    with ChatServer() as server:
        proc = cli(env, "replay", str(trace), "--endpoint", server.url, "--model", "chat-model", "--think-scale",
                   "0", "--output", str(root / REPLAY), "--no-progress", timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root


def _md(folder: Path) -> dict:
    return json.loads((folder / "mlharness_run.json").read_text())


def _results(env: dict, *args: str) -> list[dict]:
    proc = cli(env, "results", *args, "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_record_keeps_loadgens_line_beside_the_rounds_verdict(root):
    summary = (root / QWEN / "mlperf_log_summary.txt").read_text()
    assert "Result is : INVALID" in summary and "Early stopping satisfied: NO" in summary
    qwen, demo = _md(root / QWEN)["result"], _md(root / DEMO)["result"]
    assert (qwen["valid"], qwen["loadgen_valid"]) == (True, False)
    assert "early stopping waived for qwen3.6-27b results" in qwen["waived"] and "v6.1" in qwen["waived"]
    assert (demo["valid"], demo["loadgen_valid"], demo["waived"]) == (False, False, None)


def test_report_and_results_show_the_waived_run_valid_and_the_ordinary_one_invalid(root, env):
    proc = cli(env, "report", str(root), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = [line.replace("│", " ").split() for line in proc.stdout.splitlines()]
    rows = {c[0]: " ".join(c) for c in cells if c and c[0] in (QWEN, DEMO)}
    assert "VALID (early stopping waived)" in rows[QWEN], proc.stdout
    assert "INVALID" in rows[DEMO] and "waived" not in rows[DEMO], proc.stdout
    valid = {r["folder"]: r for r in _results(env, "list", str(root), "--valid")}
    assert QWEN in valid and DEMO not in valid
    assert "early stopping waived" in valid[QWEN]["waived"] and valid[QWEN]["validity"] == "VALID"
    invalid = {r["folder"]: r for r in _results(env, "list", str(root), "--invalid")}
    assert DEMO in invalid and invalid[DEMO]["waived"] is None and QWEN not in invalid
    table = cli(env, "results", "list", str(root), "--benchmark", "qwen3.6-27b", timeout=120).stdout
    assert "VALID (early stopping waived)" in " ".join(table.split()), table


def test_a_run_recorded_before_the_rounds_verdict_is_judged_the_same(root, env, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(root / QWEN, old / QWEN)
    md = _md(old / QWEN)
    md["result"] = {k: v for k, v in md["result"].items() if k not in ("loadgen_valid", "waived")} | {"valid": False}
    (old / QWEN / "mlharness_run.json").write_text(json.dumps(md))
    (run,) = _results(env, "list", str(old))
    assert run["validity"] == "VALID" and "early stopping waived" in run["waived"]
    md["round"] = "v6.0"  # a round that does not waive it
    (old / QWEN / "mlharness_run.json").write_text(json.dumps(md))
    assert [r["validity"] for r in _results(env, "list", str(old))] == ["INVALID"]


def test_a_run_records_the_checkout_commit_and_the_users_label(root):
    md = _md(root / QWEN)
    assert md["label"] == LABEL and _md(root / DEMO)["label"] is None
    package = Path(__file__).resolve().parent.parent / "mlharness"
    head = subprocess.run(["git", "-C", str(package), "rev-parse", "HEAD"], capture_output=True, text=True,
                          timeout=10)
    if head.returncode != 0:
        assert md["git_commit"] is None and md["git_dirty"] is None
    else:
        assert md["git_commit"] == head.stdout.strip() and isinstance(md["git_dirty"], bool)


def test_the_commit_is_none_outside_a_checkout_and_dirty_when_the_package_changed(tmp_path):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    checkout, pkg = tmp_path / "checkout", tmp_path / "checkout" / "mlharness"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m",
                                                "one"]):
        subprocess.run([git, "-C", str(checkout), *args], check=True, timeout=30)
    head = subprocess.run([git, "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          timeout=10, check=True).stdout.strip()
    assert source_commit.__wrapped__(pkg) == {"git_commit": head, "git_dirty": False}
    (pkg / "__init__.py").write_text("x = 2\n")
    assert source_commit.__wrapped__(pkg) == {"git_commit": head, "git_dirty": True}
    inner = pkg / "sub"  # a folder of a checkout that is not its package (an installed copy in a venv inside it)
    inner.mkdir()
    assert source_commit.__wrapped__(inner) == {"git_commit": None, "git_dirty": None}
    assert source_commit.__wrapped__(tmp_path / "nowhere") == {"git_commit": None, "git_dirty": None}


def test_history_by_commit_gives_one_row_per_commit_in_the_order_first_measured(root, env, tmp_path):
    history = tmp_path / "history"
    commits, p99s = ["a" * 40, "b" * 40, "a" * 40], [1_000_000, 5_000_000, 3_000_000]
    for i, (commit, p99) in enumerate(zip(commits, p99s, strict=True)):
        dest = history / f"sysA/demo/Server/performance/run_{i + 1}"  # same start time: ordered by folder
        shutil.copytree(root / DEMO, dest)
        md = _md(dest)
        md["git_commit"], md["git_dirty"] = commit, i == 1
        (dest / "mlharness_run.json").write_text(json.dumps(md))
        summary = dest / "mlperf_log_summary.txt"
        summary.write_text(re.sub(r"^99.00 percentile latency \(ns\)\s*:.*$", f"99.00 percentile latency (ns) : {p99}",
                                  summary.read_text(), flags=re.M))
    runs = _results(env, "history", "p99", str(history))
    assert [(r["git_commit"], r["value"]) for r in runs] == list(zip(commits, p99s, strict=True))
    groups = _results(env, "history", "p99", str(history), "--by", "commit")
    assert [(g["commit"], g["runs"], g["dirty"], g["median"]) for g in groups] == [
        ("a" * 40, 2, False, 2_000_000), ("b" * 40, 1, True, 5_000_000)]
    assert [g["commit"] for g in _results(env, "history", "p99", str(history), "--by", "commit", "--last", "1")] \
        == ["b" * 40]
    table = " ".join(cli(env, "results", "history", "p99", str(history), "--by", "commit", timeout=120).stdout
                     .replace("│", " ").split())
    assert "aaaaaaaaaaaa 2 2.000 ms 1.000 ms 3.000 ms" in table and "bbbbbbbbbbbb (changed) 1 5.000 ms" in table, table


def test_a_replay_runs_session_figures_are_queryable_and_equal_its_file(root, env):
    figures = json.loads((root / REPLAY / "sessions_summary.json").read_text())
    for name, expected in (("sessions.sessions_per_s", figures["sessions_per_s"]),
                           ("sessions.turn.ttft_ms.p90", figures["turn"]["ttft_ms"]["p90"]),
                           ("sessions.session_latency_ms.p99", figures["session_latency_ms"]["p99"]),
                           ("sessions.turns", figures["turns"])):
        (point,) = _results(env, "history", name, str(root), "--manifest", _md(root / REPLAY)["manifest"]["name"])
        assert point["folder"] == REPLAY and point["value"] == pytest.approx(float(expected), rel=1e-12), name


def test_submission_run_refuses_a_metric_that_cannot_score_before_any_step(tmp_path):
    import os

    env = {**os.environ, "MLHARNESS_CACHE": str(tmp_path / "cache"),
           "MLHARNESS_BFCL_PYTHON": str(tmp_path / "missing" / "python")}
    results = tmp_path / "results"
    proc = cli(env, "submission", "run", "--manifest", "qwen3.6-27b-oracle", "--scenarios", "SingleStream",
               "--division", "open", "--submitter", "ORG", "--results", str(results), "--min-duration-ms", "0",
               timeout=120)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, text[-3000:]
    assert "accuracy metric bfcl_v4 cannot score on this machine, so no step was started" in text, text
    assert "MLHARNESS_BFCL_PYTHON" in text and str(tmp_path / "missing" / "python") in text
    assert not results.exists()
