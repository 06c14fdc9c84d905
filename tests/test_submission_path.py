"""The README's submission path as a user follows it: the commands of its "Submissions, audits and reports"
block, run as written (in a scratch folder: every path in them is relative), with the system file that
`mlharness submission system-template` prints; a failed audit that says why (scores and band) and that
`--resume` runs again; the exit codes of `submission check`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlharness.submission.checker import exit_status
from mlharness.submission.compliance import verify_performance
from mlharness.submission.findings import Finding, Report
from mlharness.submission.system import describe_system, load_overrides, template_text
from tests.helpers.loadgen_logs import write_run

REPO = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    """The shell commands of the documented submission block (its reference page, else the README's section),
    continuation lines joined, up to the check."""
    page = REPO / "docs" / "submission.md"
    text = (page if page.is_file() else REPO / "README.md").read_text()
    section = text.split("# Submissions, audits and reports", 1)[1]
    block = section.split("```", 2)[1]
    commands = [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]
    end = next(i for i, c in enumerate(commands) if c.startswith("mlharness submission check"))
    return commands[: end + 1]


def shell(command: str, cwd: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def readme_run(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The README's commands in a scratch folder, `mlharness` being this interpreter's console script."""
    cwd = tmp_path_factory.mktemp("readme")
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    commands = readme_commands()
    procs = {}
    for command in commands:
        procs[command] = proc = shell(command, cwd, env)
        if proc.returncode != 0:  # as `cmd1 && cmd2 && ...` would
            break
    return {"cwd": cwd, "env": env, "commands": commands, "procs": procs}


def _by_prefix(run: dict, prefix: str) -> tuple[str, subprocess.CompletedProcess]:
    return next((c, p) for c, p in run["procs"].items() if c.startswith(prefix))


@pytest.mark.slow
def test_readme_submission_commands_pass_check(readme_run):
    commands = readme_run["commands"]
    assert [c.split()[1:3] for c in commands] == [["dataset", "synth"], ["submission", "system-template"],
                                                  ["submission", "run"], ["submission", "package"],
                                                  ["submission", "check"]]
    assert "--system-overrides system.yaml" in commands[2] and "> system.yaml" in commands[1]
    assert list(readme_run["procs"]) == commands  # the chain ran to its end
    for command, proc in readme_run["procs"].items():
        assert proc.returncode == 0, (command, proc.stdout + proc.stderr)
    _, check = _by_prefix(readme_run, "mlharness submission check")
    assert "PASSED: 0 problem(s)" in check.stdout, check.stdout
    _, run = _by_prefix(readme_run, "mlharness submission run")
    # the runs are short on a busy host: a failed performance comparison keeps the official verdict in the tree,
    # says why (scores and band), and is a development finding in the words check lists it with
    failed = re.findall(r"(TEST0[14]) performance: FAIL: test [\d,.e+]+ vs reference [\d,.e+]+ \S+ "
                        r"\([+-][\d.]+%\); allowed: ", run.stdout)
    findings = re.findall(r"development finding \(resnet/\w+ (TEST0[14])\): (.*) \(tolerated by ", run.stdout)
    assert [test for test, _ in findings] == failed, run.stdout
    for test, words in findings:
        assert words.startswith(f"{test} did not pass its performance comparison, between runs of 1000 ms"), words
        assert f"{test}/verify_performance.txt: {words} (tolerated: --allow-development)" in check.stdout, \
            check.stdout
    system = json.loads(next((readme_run["cwd"] / "submission").glob("open/ORG/systems/*.json")).read_text())
    assert system["status"] == "available" and system["cooling"] == "air"
    assert system["host_memory_configuration"] and system["host_networking_topology"] == "N/A"


@pytest.mark.slow
def test_resume_runs_a_failed_audit_again(readme_run):
    """An audit whose recorded verification failed is run again by --resume; complete tests are skipped."""
    run_cmd, _ = _by_prefix(readme_run, "mlharness submission run")
    runs = readme_run["cwd"] / "results" / ".mlharness" / "runs"
    (record,) = runs.glob("*/resnet/Offline/TEST04")
    (record / "verdict.json").write_text(json.dumps({"performance": False}))  # as a failed verification leaves it
    before = {p: json.loads((p / "step.json").read_text())["finished"] for p in runs.glob("*/resnet/*/*")
              if (p / "step.json").is_file()}
    proc = shell(run_cmd + " --resume", readme_run["cwd"], readme_run["env"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "resnet Offline TEST04: failed its verification before, run again (--resume)" in out, out
    assert re.search(r"✓ \[\d/8\] resnet Offline TEST04 \([\d.]+ s\)", out), out
    after = {p: json.loads((p / "step.json").read_text())["finished"] for p in before}
    assert after[record] != before[record]
    for step in ("accuracy", "performance"):  # complete and not audits: left as they were
        (path,) = [p for p in before if p.parent.name == "Offline" and p.name == step]
        assert after[path] == before[path]
    assert "resnet Offline accuracy: complete, skipped (--resume)" in out


def test_failed_audit_reason_holds_the_scores_and_the_band(tmp_path):
    test04 = verify_performance(write_run(tmp_path / "r4", "Offline", 1000.0), write_run(tmp_path / "t4", "Offline",
                                                                                         1300.0), "TEST04")
    assert not test04.passed and test04.text.splitlines()[-1] == "TEST FAIL: Test score invalid"
    assert test04.reason == ("test 1,300 vs reference 1,000 samples/s (+30.0%); allowed: less than 10% above the "
                             "reference: below 1,100")
    test01 = verify_performance(write_run(tmp_path / "r1", "Offline", 1000.0), write_run(tmp_path / "t1", "Offline",
                                                                                         700.0), "TEST01")
    assert test01.reason == ("test 700 vs reference 1,000 samples/s (-30.0%); allowed: within 10% of the reference: "
                             "900 to 1,100")


def test_audit_verify_prints_why_and_that_short_runs_are_a_development_finding(tmp_path, run_cli):
    scen = tmp_path / "Offline"
    write_run(scen / "performance" / "run_1", "Offline", 1000.0, effective_min_duration_ms=1000)
    write_run(scen / "TEST04" / "performance" / "run_1", "Offline", 1300.0, effective_min_duration_ms=1000)
    proc = run_cli("audit", "verify", "TEST04", "--results", str(scen))
    # runs of 1 s: a development finding, in the words of `submission check`, as `submission run` reports it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TEST04 performance FAIL: test 1,300 vs reference 1,000 samples/s (+30.0%)" in proc.stdout
    assert ": development finding: TEST04 did not pass its performance comparison, between runs of 1000 ms: " \
           "figures of runs that short vary by more than the band; it is meant for runs of at least 600000 ms" \
           in proc.stdout, proc.stdout
    # official durations: the verdict alone, no note
    write_run(scen / "performance" / "run_1", "Offline", 1000.0, effective_min_duration_ms=600000)
    write_run(scen / "TEST04" / "performance" / "run_1", "Offline", 1300.0, effective_min_duration_ms=600000)
    proc = run_cli("audit", "verify", "TEST04", "--results", str(scen))
    assert proc.returncode == 4 and "compared runs of" not in proc.stdout, proc.stdout


def test_resume_logic_reruns_only_failed_audits(tmp_path):
    from mlharness.submission.layout import Tree
    from mlharness.submission.steps import STEP_FILES, complete, record_verdict

    tree, ids = Tree(tmp_path / "results"), ("box", "resnet", "Offline")
    for step in ("performance", "TEST04"):
        for folder, names in STEP_FILES[step]:
            for name in names:
                (tree.scenario_dir(*ids) / folder).mkdir(parents=True, exist_ok=True)
                (tree.scenario_dir(*ids) / folder / name).write_text("x")
        tree.record_dir(*ids, step).mkdir(parents=True)
        (tree.record_dir(*ids, step) / "step.json").write_text(json.dumps({"signature": "s"}))
    assert complete(tree, ids, "TEST04", "s")  # not verified yet: complete
    record_verdict(tree, ids, "TEST04", {"performance": True})
    assert complete(tree, ids, "TEST04", "s")
    record_verdict(tree, ids, "TEST04", {"performance": False})
    assert not complete(tree, ids, "TEST04", "s") and complete(tree, ids, "performance", "s")


def test_check_exit_codes_follow_the_readme():
    report = Report(Path("."), "v6.1")
    assert exit_status(report) == 0
    report.findings.append(Finding("warning", "x", "tolerated"))
    assert exit_status(report) == 0
    report.findings.append(Finding("error", "open/ORG/results/box/resnet/Offline/user.conf", "missing"))
    assert exit_status(report) == 2
    report.findings.append(Finding("error", "closed/ORG/results/box/resnet/Offline/TEST04", "TEST04 did not pass"))
    assert exit_status(report) == 4


def test_system_template_is_a_valid_system_file(tmp_path, run_cli):
    proc = run_cli("submission", "system-template")
    assert proc.returncode == 0 and proc.stdout == template_text()
    path = tmp_path / "system.yaml"
    path.write_text(proc.stdout)
    overrides = load_overrides(path)
    assert overrides["status"] == "available" and overrides["system_type"] == "edge"
    desc = describe_system(overrides, submission={"division": "open", "submitter": "ORG", "system_name": "box"})
    assert desc.missing == [] and desc.problems == [], desc.missing
