"""``mlharness submission run`` / ``package`` / ``check`` for deepseek-r1 end to end: the real CLI and LoadGen, the
token oracle on the synthetic set in the cache (20 samples, the five kinds, LiveCodeBench programs run in the
sandbox), Offline and Server (datacenter: Offline plus Server or Interactive), TEST06 each, a short development
duration: the tree is filed under the official benchmark ID and checks with only development findings."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.helpers.cli import cli

pytest.importorskip("pandas")

pytestmark = pytest.mark.slow

SYSTEM = "dsbox"
OVERRIDES = {"status": "available", "system_type": "datacenter", "cooling": "air",
             "host_memory_configuration": "1x 24 GB", "host_networking_topology": "N/A",
             "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}
SCENARIOS = ("Offline", "Server")


@pytest.fixture(scope="module")
def tree(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    work = tmp_path_factory.mktemp("deepseek-submission")
    overrides = work / "system.yaml"
    overrides.write_text(yaml.safe_dump(OVERRIDES))
    results = work / "results"
    proc = cli(env, "submission", "run", "--manifest", "deepseek-r1-oracle", "--scenarios", *SCENARIOS,
               "--division", "open", "--submitter", "Acme", "--system-name", SYSTEM, "--results", str(results),
               "--system-overrides", str(overrides), "--min-duration-ms", "1000")
    return {"work": work, "results": results, "proc": proc}


def test_runs_are_valid_exact_match_100_and_test06_passes(tree):
    proc = tree["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for scenario in SCENARIOS:
        scen = tree["results"] / SYSTEM / "deepseek-r1" / scenario
        summary = (scen / "performance" / "run_1" / "mlperf_log_summary.txt").read_text()
        assert re.search(r"^Result is : VALID", summary, re.M), summary
        accuracy = (scen / "accuracy" / "accuracy.txt").read_text()
        assert re.search(r".*'exact_match':\s([\d.]+).*", accuracy).group(1) == "100.0", accuracy
        lines = (scen / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
        assert lines[1:3] == ["EOS check pass: True", "Sample length check pass: True"], lines
        if scenario == "Server":
            conf = (scen / "user.conf").read_text()
            assert "deepseek-r1.Server.target_qps = " in conf


def test_package_checks_with_only_development_findings(tree, env):
    out = tree["work"] / "package"
    proc = cli(env, "submission", "package", "--results", str(tree["results"]), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lenient = cli(env, "submission", "check", str(out), "--allow-development")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert "PASSED: 0 problem(s)" in lenient.stdout
    tolerated = {line.removeprefix("WARNING ").removesuffix(" (tolerated: --allow-development)")
                 for line in lenient.stdout.splitlines() if line.endswith("(tolerated: --allow-development)")}
    assert any("deepseek-r1 needs the whole dataset (4388)" in t for t in tolerated), lenient.stdout
    strict = cli(env, "submission", "check", str(out))
    errors = {line.removeprefix("ERROR ") for line in strict.stdout.splitlines() if line.startswith("ERROR ")}
    assert strict.returncode == 2 and errors == tolerated, strict.stdout
    for scenario in SCENARIOS:
        row = [line for line in lenient.stdout.splitlines() if " deepseek-r1 " in line and f" {scenario} " in line]
        assert row and "exact_match 100" in row[0] and "TEST06 PASS" in row[0], lenient.stdout
