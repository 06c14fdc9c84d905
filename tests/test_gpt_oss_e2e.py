"""gpt-oss-120b end to end: the oracle's exact_match is exactly 100 (Offline and Server, through `submission run`),
TEST07 and TEST09 pass on it with the verdict files the official verification scripts write (fixtures), they fail
on the same logs cut short, and the tree packages and checks with only development findings (and, given a checkout
of mlcommons/inference, the official checker passes its TEST07 and TEST09).

Fixtures (``tests/fixtures/gpt_oss/``), from the official compliance/TEST09/run_verification.py and
compliance/TEST07/run_verification.py (with eval_mlperf_accuracy.py as its accuracy script) run on the oracle's
Offline audit logs of the synthetic set (24 samples, the cache's default) and on those logs with every answer
cut to its first 100 tokens: ``test09_{ok,cut}_verify_output_len.txt`` and the summary part of TEST07's
verify_accuracy.txt, ``test07_{ok,cut}_summary.txt``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import cli
from tests.helpers.llm_submission import check_development_only, package, submission_tree, summary_row

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("openai_harmony")

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "gpt_oss"
SYSTEM = "box"
SCENARIOS = ("Offline", "Server")


@pytest.fixture(scope="module")
def tree(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return submission_tree(env, tmp_path_factory.mktemp("gpt-oss-submission"), "gpt-oss-120b-oracle", SYSTEM,
                           SCENARIOS)


def scen_dir(tree, scenario: str) -> Path:
    return tree["results"] / SYSTEM / "gpt-oss-120b" / scenario


def test_oracle_scores_exactly_its_maximum(tree):
    assert tree["proc"].returncode == 0, tree["proc"].stdout[-3000:] + tree["proc"].stderr[-3000:]
    for scenario in SCENARIOS:
        text = (scen_dir(tree, scenario) / "accuracy" / "accuracy.txt").read_text()
        found = [float(m.group(1)) for line in text.splitlines() if (m := re.match(r".*'exact_match':\s([\d.]+).*",
                                                                                     line))]
        assert found == [100.0], text
        summary = (scen_dir(tree, scenario) / "performance" / "run_1" / "mlperf_log_summary.txt").read_text()
        assert re.search(r"^Result is : VALID", summary, re.M), summary


def _summary_part(text: str) -> str:
    lines = text.splitlines(keepends=True)
    i = [k for k, line in enumerate(lines) if line.strip() == "TEST07 Verification Summary"][0]
    return "".join(lines[i - 1:])


def test_test07_and_test09_pass_on_the_oracle_as_the_official_scripts_say(tree):
    for scenario in SCENARIOS:
        d = scen_dir(tree, scenario)
        assert not (d / "TEST06").exists() and not (d / "TEST01").exists()
        t9 = (d / "TEST09" / "verify_output_len.txt").read_text()
        t7 = (d / "TEST07" / "verify_accuracy.txt").read_text()
        assert t9.splitlines()[-1] == "TEST PASS" and t7.splitlines()[-1] == "TEST PASS"
        # every sample of the set was issued once and logged
        for test in ("TEST07", "TEST09"):
            log = json.loads((d / test / "accuracy" / "mlperf_log_accuracy.json").read_text())
            assert sorted(e["qsl_idx"] for e in log) == list(range(24))
        if scenario == "Offline":
            assert t9 == (FIXTURES / "test09_ok_verify_output_len.txt").read_text()
            assert _summary_part(t7) == (FIXTURES / "test07_ok_summary.txt").read_text()


def test_test07_and_test09_fail_on_cut_logs_as_the_official_scripts_say(tree, env, tmp_path):
    from mlharness.submission import test07, test09
    from mlharness.tasks.gpt_oss.metric import score_log

    d = scen_dir(tree, "Offline")
    synth = Path(env["MLHARNESS_CACHE"]) / "gpt_oss_synth"
    cut = {}
    for test in ("TEST07", "TEST09"):
        entries = json.loads((d / test / "accuracy" / "mlperf_log_accuracy.json").read_text())
        for e in entries:
            e["data"] = e["data"][: 8 * 100]
        cut[test] = tmp_path / f"{test}.json"
        cut[test].write_text(json.dumps(entries))
    r9 = test09.verify(cut["TEST09"], Path("mlharness/audit/TEST09/gpt-oss-120b/audit.config"))
    assert not r9.passed and r9.text() == (FIXTURES / "test09_cut_verify_output_len.txt").read_text()
    r7 = test07.verify(cut["TEST07"], Path("mlharness/audit/TEST07/gpt-oss-120b/audit.config"),
                       lambda log: score_log(log, synth / "acc/acc_eval_compliance_gpqa.parquet", synth / "tokenizer"))
    assert not r7.passed and _summary_part(r7.text()) == (FIXTURES / "test07_cut_summary.txt").read_text()


def test_package_checks_with_only_development_findings(tree, env):
    stdout = check_development_only(env, package(env, tree), "min_duration is 1000 ms")
    for scenario in SCENARIOS:
        row = summary_row(stdout, "gpt-oss-120b", scenario)
        assert "exact_match 100" in row and "TEST07 PASS" in row and "TEST09 PASS" in row, row


def _official_checker() -> Path | None:
    repo = os.environ.get("MLHARNESS_INFERENCE_REPO")
    tool = Path(repo) / "tools" / "submission" if repo else None
    ok = tool is not None and (tool / "submission_checker" / "main.py").is_file() and importlib.util.find_spec("yaml")
    return tool if ok else None


@pytest.mark.skipif(_official_checker() is None, reason="MLHARNESS_INFERENCE_REPO names no mlcommons/inference "
                                                        "checkout")
def test_official_checker_passes_test07_and_test09_of_the_closed_tree(tree, env, tmp_path):
    """The package, relabelled closed (where the checker reads the audits): the official v6.1 checker finds its
    TEST07 and TEST09 directories and their verify files passing."""
    package = tmp_path / "package"
    proc = cli(env, "submission", "package", "--results", str(tree["results"]), "--out", str(package))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (package / "open").rename(package / "closed")
    for desc in (package / "closed").rglob("systems/*.json"):
        desc.write_text(desc.read_text().replace('"division": "open"', '"division": "closed"'))
    out = subprocess.run([sys.executable, "-m", "submission_checker.main", "--input", str(package), "--version",
                          "v6.1"], capture_output=True, text=True, timeout=120, cwd=_official_checker())
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text[-3000:]
    for scenario in SCENARIOS:
        assert f"TEST07 accuracy check in {package}/closed/Acme/results/{SYSTEM}/gpt-oss-120b/{scenario}/TEST07 " \
               f"passed" in text, text[-3000:]
        assert f"TEST09 output length check in {package}/closed/Acme/results/{SYSTEM}/gpt-oss-120b/{scenario}/" \
               f"TEST09 passed" in text, text[-3000:]
    assert not any(("TEST07" in line or "TEST09" in line) and " ERROR] " in line for line in text.splitlines())
