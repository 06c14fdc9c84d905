"""Expected performance calibrated before a performance run, through the real CLI and the real LoadGen.

Two toy models with no user.conf of their own: a fast one (the echo predictor, microseconds per query) and a
slow one (a fixed sleep per sample). LoadGen's defaults (10 ms expected latency, 1 QPS, ...) make both INVALID
in some scenario; with calibration every scenario is VALID with nothing but ``--min-duration-ms 1000``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mlharness.calibration import calibrate as cal
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import parse_summary

SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")
SLOW_SAMPLE_S = 0.001


def toy_manifest(folder: Path, name: str, sleep_per_sample_s: float = 0.0) -> Path:
    (folder / "none.bin").write_bytes(b"")
    predict = (
        "predict: |\n  import time\n  def predict(ctx, run, inputs):\n"
        f"      time.sleep({sleep_per_sample_s} * len(inputs[0]))\n      return run(inputs)\n"
        if sleep_per_sample_s else ""
    )
    text = (
        f"name: {name}\n"
        "framework:\n  name: echo\n  warmup: 1\n"
        "inputs:\n  - name: x\n    shape: [4]\noutputs:\n  - name: y\n"
        "model:\n  graph_path: none.bin\n"
        "dataset:\n  name: inline\n  init: |\n    def init(count):\n        return count or 64\n"
        "batching:\n  max_batchsize: 8\n"
        "preprocess: |\n  import numpy as np\n  def preprocess(ctx, index):\n"
        "      return np.full((4,), index, np.float32)\n"
        "postprocess: |\n  def postprocess(ctx, outputs):\n      return outputs[0][:, 0]\n" + predict
    )
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def toys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("toys")
    return {"fast": toy_manifest(folder, "fasttoy"), "slow": toy_manifest(folder, "slowtoy", SLOW_SAMPLE_S)}


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["MLHARNESS_CACHE"] = str(tmp_path / "cache")
    return subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--mode", "performance", "--no-progress",
                           *args], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)


@pytest.mark.timing
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("toy", ["fast", "slow"])
def test_calibrated_runs_are_valid_in_every_scenario(toys, tmp_path, toy, scenario):
    out = tmp_path / "run"
    proc = run(tmp_path, "--manifest", str(toys[toy]), "--scenario", scenario, "--min-duration-ms", "1000",
               "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    summary = parse_summary(out / "mlperf_log_summary.txt", scenario)
    assert summary.valid, (proc.stdout, proc.stderr, (out / "mlperf_log_summary.txt").read_text())
    meta = json.loads((out / "mlharness_run.json").read_text())
    c = meta["calibration"]
    key = cal.EXPECTED_KEYS[scenario]
    assert c["calibrated"] is True and c["key"] == key and c["samples_measured"] >= 8
    assert c["queries_measured"] >= cal.MIN_ROUNDS and 0 < c["seconds"] < 5
    # the one line that says so, and the value LoadGen really used
    assert re.search(rf"calibrated (expected latency|expected QPS|target QPS): {re.escape(cal._fmt(c['value']))}",
                     proc.stderr), proc.stderr
    settings = meta["settings"]
    used = {"Offline": settings["offline_expected_qps"], "Server": settings["server_target_qps"],
            "SingleStream": settings["single_stream_expected_latency_ns"] / 1e6,
            "MultiStream": settings["multi_stream_expected_latency_ns"] / 1e6}[scenario]
    assert used == pytest.approx(c["value"], rel=1e-3)
    if toy == "slow" and scenario in ("SingleStream", "MultiStream"):
        per_query = SLOW_SAMPLE_S * (8 if scenario == "MultiStream" else 1) * 1000
        assert c["measured"] >= per_query  # the sleep is in what was measured
    # the user.conf the run effectively used, beside its logs, reproduces the settings
    conf = (out / "user.conf").read_text()
    model = meta["conf_model"]
    line = next(ln for ln in conf.splitlines() if ln.startswith(f"{model}.{scenario}.{key} = "))
    assert float(line.split("=")[1]) == pytest.approx(c["value"], rel=1e-3)
    assert f"{model}.{scenario}.min_duration = 1000" in conf
    lgs.validate_user_conf(out / "user.conf", model)


def test_without_calibration_the_fast_toy_is_invalid_and_the_named_fix_works(toys, tmp_path):
    for scenario in ("SingleStream", "Offline"):
        out = tmp_path / f"{scenario}-nocal"
        base = ["--manifest", str(toys["fast"]), "--scenario", scenario, "--min-duration-ms", "1000"]
        proc = run(tmp_path, *base, "--output", str(out), "--no-calibrate")
        assert proc.returncode == 0, proc.stderr
        assert not parse_summary(out / "mlperf_log_summary.txt", scenario).valid
        meta = json.loads((out / "mlharness_run.json").read_text())
        assert meta["calibration"] == {"calibrated": False, "reason": "--no-calibrate"}
        assert not (out / "user.conf").exists()
        text = " ".join(proc.stdout.split())
        assert "INVALID because: min duration not met" in text, proc.stdout
        assert "LoadGen recommends: " + ("Decrease the expected latency" if scenario == "SingleStream"
                                         else "Increase expected QPS") in text
        if scenario == "SingleStream":  # the error is shown as LoadGen's text, not as its key
            assert "Ran out of generated queries to issue before the minimum query count" in text
            assert "['error_runtime']" not in proc.stdout
        fix = re.search(r"fix: (--target-(?:latency-ms|qps) [0-9.e+-]+)", proc.stdout)
        assert fix, proc.stdout
        fixed = tmp_path / f"{scenario}-fixed"
        proc = run(tmp_path, *base, "--output", str(fixed), "--no-calibrate", *shlex.split(fix.group(1)))
        assert proc.returncode == 0, proc.stderr
        assert parse_summary(fixed / "mlperf_log_summary.txt", scenario).valid, proc.stdout
        assert "INVALID because" not in proc.stdout


def test_a_stated_expected_performance_is_not_calibrated(toys, tmp_path):
    conf = tmp_path / "mine.conf"
    conf.write_text("fasttoy.SingleStream.target_latency = 0.001\n")
    out = tmp_path / "conf"
    proc = run(tmp_path, "--manifest", str(toys["fast"]), "--scenario", "SingleStream", "--min-duration-ms", "300",
               "--user-conf", str(conf), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["calibration"]["calibrated"] is False and str(conf) in meta["calibration"]["reason"]
    assert meta["settings"]["single_stream_expected_latency_ns"] == 1000
    assert "calibrated" not in proc.stderr


def test_given_by_reads_flags_and_the_given_user_conf_only(tmp_path):
    o = lgs.Overrides()
    assert cal.given_by("Offline", "m", o, None) is None
    assert cal.given_by("Offline", "m", lgs.Overrides(target_qps=5), None).endswith("(--target-qps)")
    assert cal.given_by("SingleStream", "m", lgs.Overrides(target_qps=5), None) is None
    conf = tmp_path / "u.conf"
    conf.write_text("*.Offline.target_qps = 10\nother.SingleStream.target_latency = 3\nm.Server.target_latency = 9\n")
    assert cal.given_by("Offline", "m", o, conf) == str(conf)
    assert cal.given_by("SingleStream", "m", o, conf) is None  # another model's line
    assert cal.given_by("Server", "m", o, conf) is None  # the Server latency bound is not its expected rate


SUBMISSION_OVERRIDES = {"status": "available", "system_type": "edge", "cooling": "air",
                        "host_memory_configuration": "1x 24 GB", "host_networking_topology": "N/A",
                        "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlharness.tasks.imagenet.synth import write_synthetic_imagenet

    return write_synthetic_imagenet(tmp_path_factory.mktemp("imagenet") / "imagenet", count=32)


def submission(tmp_path: Path, env_cache: Path, images: Path, *args: str) -> subprocess.CompletedProcess:
    import yaml

    overrides = tmp_path / "system.yaml"
    overrides.write_text(yaml.safe_dump(SUBMISSION_OVERRIDES))
    env = dict(os.environ)
    env["MLHARNESS_CACHE"] = str(env_cache)
    return subprocess.run(
        [sys.executable, "-m", "mlharness.cli", "submission", "run", "--manifest", "resnet50-oracle",
         "--dataset-path", str(images), "--count", "32", "--division", "open", "--submitter", "Acme",
         "--system-name", "box", "--results", str(tmp_path / "results"), "--system-overrides", str(overrides),
         "--min-duration-ms", "1000", "--min-query-count", "32", "--threads", "1", *args],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.timing  # every run it sizes must come out VALID
def test_submission_run_sizes_its_runs_without_a_tune(tmp_path, shared_cache, imagenet):
    proc = submission(tmp_path, shared_cache, imagenet, "--scenarios", "Offline", "SingleStream", "Server")
    assert proc.returncode in (0, 4), proc.stdout + proc.stderr  # 4: a timing verdict on a busy host
    results = tmp_path / "results"
    for scenario in ("Offline", "SingleStream", "Server"):
        scen = results / "box" / "resnet" / scenario if (results / "box" / "resnet").is_dir() else \
            next((results / "box").iterdir()) / scenario
        assert parse_summary(scen / "performance" / "run_1" / "mlperf_log_summary.txt", scenario).valid
        runs = results / ".mlharness" / "runs" / "box" / scen.parent.name / scenario
        meta = json.loads((runs / "performance" / "mlharness_run.json").read_text())
        # calibrated; or, when the calibrated run was INVALID on this busy host, repeated with the explained fix
        assert meta["calibration"]["calibrated"] is True or (
            ".retry" in meta["calibration"]["reason"] and f"resnet/{scenario} performance INVALID" in proc.stdout)
        # the scenario's user.conf is the one the performance run used, calibrated line included
        key = cal.EXPECTED_KEYS[scenario]
        assert f"resnet50.{scenario}.{key} = " in (scen / "user.conf").read_text()
        assert (scen / "user.conf").read_text() == (runs / "performance.user.conf").read_text()
        # the compliance runs that compare performance were given the same user.conf (and did not calibrate)
        for test in ("TEST01", "TEST04"):
            step = json.loads((runs / test / "step.json").read_text())
            argv = step["argv"]
            assert argv[argv.index("--user-conf") + 1] == str(runs / "performance.user.conf")
            assert "--min-query-count" not in argv  # the user.conf states it (a flag would override it)
            t_meta = json.loads((runs / test / "mlharness_run.json").read_text())
            assert t_meta["calibration"]["calibrated"] is False
            for name in ("offline_expected_qps", "single_stream_expected_latency_ns", "server_target_qps",
                         "min_query_count", "min_duration_ms"):
                assert t_meta["settings"][name] == meta["settings"][name], (scenario, test, name)
            assert (scen / test / "verify_performance.txt").is_file()
    assert "INVALID" not in proc.stderr


@pytest.mark.slow
def test_submission_run_stops_before_compliance_when_performance_stays_invalid(tmp_path, shared_cache, imagenet):
    conf = tmp_path / "tuned.conf"
    conf.write_text("resnet50.SingleStream.target_latency = 100000\n")  # 100 s per query: far too few queries
    proc = submission(tmp_path, shared_cache, imagenet, "--scenarios", "SingleStream", "--user-conf", str(conf))
    assert proc.returncode == 5, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert "the performance run is INVALID" in err and "compliance runs were not started" in err
    assert "min duration not met" in err and "Decrease the expected latency" in err
    assert "--target-latency-ms" in err
    scen = next((tmp_path / "results" / "box").iterdir()) / "SingleStream"
    assert (scen / "performance" / "run_1" / "mlperf_log_summary.txt").is_file()
    assert not (scen / "TEST01").exists()
    assert "2 LoadGen test(s) run" not in proc.stdout


def test_compliance_argv_takes_the_effective_user_conf_instead_of_setting_flags(tmp_path):
    from mlharness.submission.sizing import set_user_conf

    argv = ["py", "-m", "mlharness.cli", "run", "--manifest", "m.yaml", "--scenario", "Server", "--mode",
            "performance", "--user-conf", "/pkg/resnet50.conf", "--count", "32", "--min-duration-ms", "1000",
            "--min-query-count", "32", "--target-qps", "5", "--threads", "1"]
    out = set_user_conf(argv, tmp_path / "used.conf")
    assert out == ["py", "-m", "mlharness.cli", "run", "--manifest", "m.yaml", "--scenario", "Server", "--mode",
                   "performance", "--user-conf", str(tmp_path / "used.conf"), "--count", "32", "--threads", "1"]
    bare = set_user_conf([a for a in argv if a not in ("--user-conf", "/pkg/resnet50.conf")], tmp_path / "u.conf")
    assert bare[bare.index("--scenario") + 2:bare.index("--scenario") + 4] == ["--user-conf", str(tmp_path / "u.conf")]


def test_a_retry_conf_appends_the_explained_fix_and_loadgen_takes_it(tmp_path):
    from mlharness.calibration.explain import explain
    from mlharness.submission.sizing import with_fixes

    data = Path(__file__).parent / "data" / "loadgen_invalid"
    exp = explain((data / "server_over_latency.summary.txt").read_text(), [], "Server", "resnet50")
    conf = tmp_path / "performance.user.conf"
    conf.write_text("resnet50.Server.min_query_count = 700\nresnet50.Server.target_qps = 269.86\n")
    retry = with_fixes(conf, exp, 1)
    assert retry.name == "performance.user.retry1.conf" and retry.parent == tmp_path
    lgs.validate_user_conf(retry, "resnet50")
    plan = lgs.SettingsPlan(model="resnet50", official=True, scenario="Server", mode="performance",
                            user_conf=retry, overrides=lgs.Overrides(), audit_config=None)
    s = lgs.build_test_settings(plan)
    assert s.server_target_qps == pytest.approx(134.9) and s.min_query_count == 700
