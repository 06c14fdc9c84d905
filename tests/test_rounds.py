"""The MLPerf round drives the seeds: runs set the chosen round's seeds on LoadGen and record the round; the
checker holds every performance and compliance log to the seeds of the round it checks for, in the official
checker's words; package refuses runs of another round; an unknown round is a clear input error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlharness.errors import SettingsError
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import detail_values
from mlharness.rounds import DEFAULT_ROUND, ROUNDS, get_round, round_of_seeds
from mlharness.submission.checker import check
from mlharness.submission.rules import ROUND_RULES

# MODEL_CONFIG[<round>]["seeds"] of the official submission checker (tools/submission/submission_checker/
# constants.py), typed in independently of mlharness/rounds.py
OFFICIAL = {
    "v6.0": {"qsl_rng_seed": 2465351861681999779, "sample_index_rng_seed": 14276810075590677512,
             "schedule_rng_seed": 3936089224930324775},
    "v6.1": {"qsl_rng_seed": 2085463073848966840, "sample_index_rng_seed": 2747215439041700203,
             "schedule_rng_seed": 16159082839903944936},
}
SYSTEM = "box"
OVERRIDES = {"status": "available", "system_type": "edge", "cooling": "air", "host_memory_configuration": "1x 24 GB",
             "host_networking_topology": "N/A", "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}
SCEN = Path("open/Acme/results") / SYSTEM / "demo" / "Offline"
RUNS = ("performance/run_1", "TEST01/performance/run_1")
SHORT = ["--min-duration-ms", "50", "--min-query-count", "64", "--target-qps", "1000000"]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=180, env=env)


def seeds_of(detail: Path) -> dict[str, int]:
    values = detail_values(detail)
    return {k: values[f"effective_{k}"] for k in OFFICIAL["v6.1"]}


# ---------------------------------------------------------------------------------------------- the table
def test_round_table_has_the_official_seeds():
    assert set(ROUNDS) >= set(OFFICIAL)
    for name, seeds in OFFICIAL.items():
        assert ROUNDS[name].seeds == seeds
        assert ROUNDS[name].test05_seeds is None  # the official constants list no TEST05 seeds for these rounds
        assert round_of_seeds(seeds) == name
        assert ROUND_RULES[name].round is ROUNDS[name]
    assert round_of_seeds({**OFFICIAL["v6.0"], "schedule_rng_seed": 1}) is None
    # the default is the round of the pinned LoadGen: its embedded mlperf.conf carries that round's seeds
    assert DEFAULT_ROUND == "v6.1" and get_round(None).name == "v6.1"
    assert {k: v for k, v in lgs.embedded_seeds().items() if not k.startswith("test05")} == OFFICIAL["v6.1"]


def test_unknown_round_is_refused():
    with pytest.raises(SettingsError, match=r"unknown MLPerf Inference round 'v6\.2'.*Did you mean 'v6\.1'\? "
                                            r"Known: v6\.0, v6\.1\."):
        get_round("v6.2")


@pytest.mark.parametrize("args", [
    ("run", "--scenario", "Offline", "--count", "4", "--round", "v5"),
    ("submission", "check", ".", "--round", "v5"),
    ("submission", "package", "--results", ".", "--out", "pkg", "--round", "v5"),
    ("submission", "run", "--scenarios", "Offline", "--division", "open", "--submitter", "A", "--round", "v5"),
])
def test_unknown_round_exits_2_listing_the_known_rounds(run_cli, tmp_path, args):
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown MLPerf Inference round 'v5'" in proc.stderr and "Known: v6.0, v6.1." in proc.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "pkg").exists()


# ------------------------------------------------------------------------------------------------- runs
def test_settings_carry_the_rounds_seeds_over_the_embedded_ones():
    for name, seeds in OFFICIAL.items():
        plan = lgs.SettingsPlan(model="resnet50", official=True, scenario="Offline", mode="performance",
                                user_conf=None, overrides=lgs.Overrides(), audit_config=None, round=name)
        s = lgs.build_test_settings(plan)
        assert {k: getattr(s, k) for k in seeds} == seeds
        # TEST05 keeps LoadGen's own alternate seeds: the rounds list none
        assert s.test05_qsl_rng_seed == lgs.embedded_seeds()["test05_qsl_rng_seed"]


def test_run_for_round_v60_logs_its_seeds_and_records_the_round(run_cli, tmp_path):
    out = tmp_path / "run"
    conf = tmp_path / "user.conf"  # a short run set in user.conf, not by a development override
    conf.write_text("*.Offline.min_duration = 50\n*.Offline.target_qps = 1000\n")
    proc = run_cli("run", "--scenario", "Offline", "--mode", "performance", "--count", "32", "--user-conf",
                   str(conf), "--output", str(out), "--no-progress", "--round", "v6.0")
    assert proc.returncode == 0, proc.stderr
    assert seeds_of(out / "mlperf_log_detail.txt") == OFFICIAL["v6.0"]
    assert detail_values(out / "mlperf_log_detail.txt")["errors"] == []
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["round"] == "v6.0" and meta["loadgen_seeds"] == OFFICIAL["v6.0"]
    assert meta["overrides"] == {} and meta["submittable"] is False
    assert "min_duration is 50 ms: the official checker rejects runs shorter than 600000 ms in every division, " \
           "open included" in meta["not_submittable_reasons"]
    # without --round: the default round's seeds, recorded as such
    proc = run_cli("run", "--scenario", "Offline", "--mode", "performance", "--count", "32", "--user-conf",
                   str(conf), "--output", str(tmp_path / "default"), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "default" / "mlharness_run.json").read_text())
    assert meta["round"] == "v6.1" and meta["loadgen_seeds"] == OFFICIAL["v6.1"]


# ------------------------------------------------------------------------------------------------ trees
@pytest.fixture(scope="module")
def trees(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A demo Offline tree and its package per round: v6.0 asked for on `submission run` only (package takes the
    tree's round), v6.1 by default everywhere."""
    work = tmp_path_factory.mktemp("rounds")
    overrides = work / "system.yaml"
    overrides.write_text(yaml.safe_dump(OVERRIDES))
    out = {}
    for name, flags in (("v6.0", ["--round", "v6.0"]), ("v6.1", [])):
        results = work / f"results-{name}"
        proc = cli(env, "submission", "run", "--scenarios", "Offline", "--division", "open", "--submitter", "Acme",
                   "--system-name", SYSTEM, "--results", str(results), "--system-overrides", str(overrides),
                   *SHORT, *flags)
        assert proc.returncode in (0, 4), proc.stdout + proc.stderr  # 4: a TEST01 timing verdict on a busy host
        proc = cli(env, "submission", "package", "--results", str(results), "--out", str(work / f"pkg-{name}"))
        assert proc.returncode == 0, proc.stderr
        assert f"round: {name}" in proc.stdout
        out[name], out[f"results-{name}"] = work / f"pkg-{name}", results
    return out


@pytest.mark.slow
@pytest.mark.parametrize("made, other", [("v6.0", "v6.1"), ("v6.1", "v6.0")])
def test_a_tree_passes_the_seed_check_of_its_round_only(trees, env, made, other):
    pkg = trees[made]
    for run in RUNS:
        assert seeds_of(pkg / SCEN / run / "mlperf_log_detail.txt") == OFFICIAL[made]
    own = check(pkg, allow_development=True, round_name=made)
    assert own.passed, [str(f) for f in own.errors]
    assert not [f for f in own.findings if "_rng_seed" in f.message]
    report = check(pkg, allow_development=True, round_name=other)
    assert not report.passed
    detail = f"{SCEN}/performance/run_1/mlperf_log_detail.txt"
    expected = {f"ERROR {detail}: {k} is wrong, expected={OFFICIAL[other][k]}, found={OFFICIAL[made][k]} (the seeds "
                f"of round {other}; the run was made for round {made})" for k in OFFICIAL[other]}
    assert {str(f) for f in report.errors} == expected  # the seeds, each named, and nothing else
    # the open division needs no audits: its TEST01 run's wrong seeds are reported as advice
    assert sum(f"{SCEN}/TEST01/performance/run_1" in str(w) and "_rng_seed is wrong" in str(w)
               for w in report.warnings) == 3
    proc = cli(env, "submission", "check", str(pkg), "--allow-development", "--round", other)
    assert proc.returncode == 2  # problems in the package: bad input (1 is a bug)
    assert f"qsl_rng_seed is wrong, expected={OFFICIAL[other]['qsl_rng_seed']}, " \
           f"found={OFFICIAL[made]['qsl_rng_seed']}" in proc.stdout
    assert "FAILED: 3 problem(s)" in proc.stdout and f"round {other}" in proc.stdout


@pytest.mark.slow
def test_package_refuses_a_tree_of_another_round(trees, env, tmp_path):
    results = trees["results-v6.0"]
    proc = cli(env, "submission", "package", "--results", str(results), "--out", str(tmp_path / "pkg"),
               "--round", "v6.1")
    assert proc.returncode == 2
    assert "was made for round v6.0" in proc.stderr and "--version v6.1" in proc.stderr
    assert not (tmp_path / "pkg").exists()
    # a tree that recorded no round (older mlharness) is judged by the seeds its logs carry
    state_file = results / ".mlharness" / "submission.json"
    state = json.loads(state_file.read_text())
    assert state["round"] == "v6.0"
    copy = tmp_path / "results"
    shutil.copytree(results, copy, symlinks=True)
    (copy / ".mlharness" / "submission.json").write_text(json.dumps({k: v for k, v in state.items()
                                                                      if k != "round"}))
    proc = cli(env, "submission", "package", "--results", str(copy), "--out", str(tmp_path / "pkg"))
    assert proc.returncode == 2
    assert "2 run(s)" in proc.stderr and "do not carry the seeds of round v6.1" in proc.stderr
    assert f"{SYSTEM}/demo/Offline/TEST01/performance/run_1/mlperf_log_detail.txt: qsl_rng_seed is wrong, " \
           f"expected={OFFICIAL['v6.1']['qsl_rng_seed']}" in proc.stderr.replace("\n", " ")
    assert "(the seeds of round v6.0)" in proc.stderr
    assert not (tmp_path / "pkg").exists()
    proc = cli(env, "submission", "package", "--results", str(copy), "--out", str(tmp_path / "pkg"), "--round",
               "v6.0")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_submission_run_refuses_to_mix_rounds_in_a_tree(trees, env):
    proc = cli(env, "submission", "run", "--scenarios", "Offline", "--division", "open", "--submitter", "Acme",
               "--system-name", SYSTEM, "--results", str(trees["results-v6.0"]), *SHORT)
    assert proc.returncode == 2
    assert "holds results for round v6.0, not v6.1" in proc.stderr


@pytest.mark.slow
def test_closed_division_counts_the_compliance_runs_seeds_too(trees, tmp_path):
    """As the official checker does in closed: the performance run's and TEST01's seeds, six errors in all."""
    pkg = tmp_path / "pkg"
    shutil.copytree(trees["v6.0"], pkg)
    shutil.move(pkg / "open", pkg / "closed")
    system = pkg / "closed" / "Acme" / "systems" / f"{SYSTEM}.json"
    system.write_text(json.dumps({**json.loads(system.read_text()), "division": "closed"}))
    scen = Path("closed/Acme/results") / SYSTEM / "demo" / "Offline"
    seed_errors = [str(f) for f in check(pkg, allow_development=True, round_name="v6.1").errors
                   if "_rng_seed is wrong" in f.message]
    assert len(seed_errors) == 6
    for run in RUNS:
        assert f"ERROR {scen}/{run}/mlperf_log_detail.txt: schedule_rng_seed is wrong, expected=" \
               f"{OFFICIAL['v6.1']['schedule_rng_seed']}, found={OFFICIAL['v6.0']['schedule_rng_seed']} (the seeds " \
               f"of round v6.1; the run was made for round v6.0)" in seed_errors
    assert not [f for f in check(pkg, allow_development=True, round_name="v6.0").findings
                if "_rng_seed" in f.message]
