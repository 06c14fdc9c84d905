"""The documented submission path ends clean on a development tree: a compliance audit whose only failure is a
performance comparison between runs shorter than the official duration is a development finding. `submission
run` reports it in the words of `submission check`, records it, and exits 0, as `check --allow-development`
passes the same tree; any other failed audit check fails both (exit status 4), naming the same audit."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest
import yaml
from rich.console import Console

from mlharness.submission.audits import report_verdicts
from mlharness.submission.checker_logs import _check_test_dir, development_finding
from mlharness.submission.compliance import Verdict
from mlharness.submission.findings import Findings, Row
from mlharness.submission.layout import Tree
from mlharness.submission.orchestrate import Outcome
from tests.helpers.echo_manifest import echo_manifest
from tests.helpers.loadgen_logs import write_run

SYSTEM = "box"
OVERRIDES = {"status": "available", "system_type": "edge", "cooling": "air", "host_memory_configuration": "1x 24 GB",
             "host_networking_topology": "N/A", "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}
# the compliance run (the only child given an audit config) answers ten times slower than the performance run:
# TEST01's performance comparison fails whatever the host does, while the responses stay the same
SLOW_AUDIT = echo_manifest("slowaudit", """\
import sys
import time

PAUSE = 0.03 if "--audit-config" in sys.argv else 0.003

def predict(ctx, run, inputs):
    time.sleep(PAUSE)
    return run(inputs)
""")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=240, env=env)


def tolerated(stdout: str) -> list[str]:
    return [line.removeprefix("WARNING ").removesuffix(" (tolerated: --allow-development)")
            for line in stdout.splitlines() if line.endswith("(tolerated: --allow-development)")]


@pytest.mark.slow
def test_a_short_failed_performance_comparison_ends_the_chain_clean(env, tmp_path):
    manifest, overrides = tmp_path / "slowaudit.yaml", tmp_path / "system.yaml"
    manifest.write_text(SLOW_AUDIT)
    overrides.write_text(yaml.safe_dump(OVERRIDES))
    results, package = tmp_path / "results", tmp_path / "package"
    run = cli(env, "submission", "run", "--manifest", str(manifest), "--scenarios", "SingleStream", "--division",
              "open", "--submitter", "Acme", "--system-name", SYSTEM, "--results", str(results),
              "--system-overrides", str(overrides), "--min-duration-ms", "200", "--min-query-count", "64",
              "--target-latency-ms", "4")
    out = run.stdout + run.stderr
    assert re.search(r"TEST01 performance: FAIL: test \S+ vs reference \S+ ns \(\+\d", out), out
    assert "TEST01 accuracy: PASS" in out, out
    # the verdict in the tree stays the official one
    scen = results / SYSTEM / "slowaudit" / "SingleStream"
    assert "TEST FAIL" in (scen / "TEST01" / "verify_performance.txt").read_text()
    assert run.returncode == 0, out
    (line,) = [ln for ln in run.stdout.splitlines() if "development finding (" in ln]
    finding = line.split("): ", 1)[1].removesuffix(" (tolerated by `submission check --allow-development`; not "
                                                   "submittable)")
    assert finding.startswith("TEST01 did not pass its performance comparison, between runs of "), line
    assert "1 development finding(s)" in run.stdout and "FAIL (development)" in run.stdout
    (record,) = (results / ".mlharness" / "runs").glob(f"{SYSTEM}/slowaudit/SingleStream/TEST01")
    assert (record / "development_finding.txt").read_text() == finding + "\n"
    assert json.loads((record / "verdict.json").read_text()) == {"accuracy": True, "performance": False}

    packed = cli(env, "submission", "package", "--results", str(results), "--out", str(package))
    assert packed.returncode == 0, packed.stdout + packed.stderr
    lenient = cli(env, "submission", "check", str(package), "--allow-development")
    assert lenient.returncode == 0 and "PASSED: 0 problem(s)" in lenient.stdout, lenient.stdout
    # the same finding, in the same words, and the same label in the results row
    assert any(t.endswith(f"TEST01/verify_performance.txt: {finding}") for t in tolerated(lenient.stdout)), \
        lenient.stdout
    assert "TEST01 FAIL (development)" in lenient.stdout, lenient.stdout
    strict = cli(env, "submission", "check", str(package))
    # without the allowance the short runs are problems (exit 2), not a failed audit (exit 4); the open
    # division's audits are advice, so the finding stays a warning there
    assert strict.returncode == 2, strict.stdout
    assert f"WARNING open/Acme/results/{SYSTEM}/slowaudit/SingleStream/TEST01/verify_performance.txt: {finding}\n" \
        in strict.stdout, strict.stdout


CASES = [  # (failed checks, duration of the audit's run in ms, a development finding?)
    (["performance"], 1000, True),
    (["performance"], 600_000, False),  # full length: the comparison means something
    (["accuracy"], 1000, False),  # different responses are never noise
    (["accuracy", "performance"], 1000, False),
]


@pytest.mark.parametrize(("failed", "duration", "development"), CASES)
def test_run_and_check_classify_a_failed_audit_alike(tmp_path, failed, duration, development):
    """`submission run`'s verdict report and the checker's rule, on the same TEST01 directory."""
    tree, ids = Tree(tmp_path / "results"), (SYSTEM, "resnet", "Offline")
    scen = tree.scenario_dir(*ids)
    write_run(scen / "performance" / "run_1", "Offline", 1000.0, effective_min_duration_ms=duration)
    write_run(scen / "TEST01" / "performance" / "run_1", "Offline", 1300.0, effective_min_duration_ms=duration)
    verdicts = [Verdict("TEST01", check, check not in failed, "", "the scores") for check in ("accuracy",
                                                                                             "performance")]
    for v in verdicts:
        name = "verify_accuracy.txt" if v.check == "accuracy" else "verify_performance.txt"
        (scen / "TEST01" / name).write_text("TEST PASS\n" if v.passed else "TEST FAIL\n")

    outcome, row, printed = Outcome(), {}, io.StringIO()
    report_verdicts(tree, ids, verdicts, row, Console(file=printed, width=400), outcome)
    checker = Findings(tmp_path / "results", allow_development=True)
    checker._row = Row("open", "Acme", SYSTEM, "resnet", "Offline")
    label = _check_test_dir(checker, "closed", None, "Offline", "TEST01", scen / "TEST01")
    audit = [f for f in checker.report.findings if "TEST01 did not pass" in f.message]

    finding = development_finding("TEST01", failed, scen / "TEST01")
    assert (finding is not None) == development
    assert bool(outcome.development) == development and bool(outcome.failed_audits) != development
    assert [f.level for f in audit] == ["warning" if development else "error"]
    assert label == row["TEST01"].join(("TEST01 ", ""))
    if development:
        assert audit[0].message == f"{finding} (tolerated: --allow-development)"
        assert f"development finding (resnet/Offline TEST01): {finding}" in printed.getvalue()
        assert row["TEST01"] == "FAIL (development)"
    else:  # named as check names it, and exit status 4 (AuditFailed) from `submission run`
        assert outcome.failed_audits == [f"resnet/Offline TEST01 {c}" for c in failed]
        assert audit[0].message == "TEST01 did not pass" and row["TEST01"] == "FAIL"
