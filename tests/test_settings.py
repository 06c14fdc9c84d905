"""settings.py: the embedded mlperf.conf, user.conf validation, TestSettings assembly (checked against the installed
LoadGen key by key), and the CLI's handling of scenario names, MLPerf model names, submittability and audit.config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mlperf_loadgen as lg
import pytest

from mlharness.errors import SettingsError
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import detail_values
from mlharness.paths import AUDIT_DIR, USER_CONF_DIR

CLI_TIMEOUT = 60


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MLHARNESS_DEMO_DIR", str(tmp_path / "demo"))


def cli(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["MLHARNESS_CACHE"] = str(tmp_path / "cache")
    env["MLHARNESS_DEMO_DIR"] = str(tmp_path / "demo")
    return subprocess.run(
        [sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True, timeout=CLI_TIMEOUT,
        cwd=cwd or tmp_path, env=env,
    )


def echo_manifest(folder: Path, mlperf_model: str | None = None, count: int = 32) -> Path:
    """A framework-free manifest: the echo predictor over an inline dataset of np.full((4,), index)."""
    (folder / "none.bin").write_bytes(b"")
    mlperf = f"mlperf:\n  model: {mlperf_model}\n" if mlperf_model else ""
    text = textwrap.dedent(f"""\
        name: echotest
        framework:
          name: echo
        inputs:
          - name: x
            shape: [4]
        outputs:
          - name: y
        model:
          graph_path: none.bin
        dataset:
          name: inline
          init: |
            def init(count):
                return count or {count}
        batching:
          max_batchsize: 8
        preprocess: |
          import numpy as np
          def preprocess(ctx, index):
              return np.full((4,), index, np.float32)
        postprocess: |
          def postprocess(ctx, outputs):
              return outputs[0][:, 0]
        """) + mlperf
    path = folder / f"echo-{mlperf_model or 'plain'}.yaml"
    path.write_text(text)
    return path


def plan(scenario: str = "Offline", user_conf: Path | None = None, model: str = "resnet50",
         mode: str = "performance", **overrides) -> lgs.SettingsPlan:
    return lgs.SettingsPlan(model=model, official=True, scenario=scenario, mode=mode, user_conf=user_conf,
                            overrides=lgs.Overrides(**overrides), audit_config=Path("/nonexistent"))


def conf(tmp_path: Path, *lines: str, name: str = "user.conf") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------------- embedded mlperf.conf


def test_embedded_conf_is_found_and_parsed():
    text = lgs.embedded_mlperf_conf()
    assert text.startswith("# The format of this config file is 'key = value'.")
    assert "\0" not in text
    models = lgs.known_models()
    assert {"resnet50", "bert", "3d-unet"} <= models
    assert "*" not in models and "resnet" not in models
    seeds = lgs.embedded_seeds()
    assert {"qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"} <= set(seeds)
    assert all(isinstance(v, int) and v > 0 for v in seeds.values())
    # the three *.* seeds are what LoadGen itself applies from its embedded conf
    s = lg.TestSettings()
    s.scenario = lg.TestScenario.Offline
    assert s.FromConfig("", "resnet50", "Offline", 0) == 0
    for key in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"):
        assert getattr(s, key) == seeds[key]


def test_every_embedded_line_uses_a_known_key_and_scenario():
    """Our key list and scenario list are at least as wide as what LoadGen's own conf uses (except the keys we
    know 6.0.17 does not read)."""
    ignored_by_loadgen = {"target_duration"}
    for _no, _m, s, k, _v in lgs.parse_conf(lgs.embedded_mlperf_conf(), "mlperf.conf"):
        assert s == "*" or s in lgs.SCENARIOS
        assert k in lgs.LOADGEN_CONF_KEYS or k in ignored_by_loadgen, k


def test_check_model_name():
    lgs.check_model_name("resnet50")
    with pytest.raises(SettingsError, match=r"'resnet' is not in the mlperf.conf.*Did you mean 'resnet50'\?"):
        lgs.check_model_name("resnet")


def test_check_scenario_suggests():
    assert lgs.check_scenario("Server") == "Server"
    with pytest.raises(SettingsError, match=r"unknown scenario 'offline'\. Did you mean 'Offline'\?"):
        lgs.check_scenario("offline")


# ------------------------------------------------------------------------------------- user.conf validation


@pytest.mark.parametrize(
    ("line", "needles"),
    [
        ("bert.Offline.target_qps = 5", ["model 'bert'", "'resnet50'", "LoadGen would ignore"]),
        ("*.offline.target_qps = 5", ["unknown scenario 'offline'", "Did you mean 'Offline'?"]),
        ("*.Sever.target_qps = 5", ["unknown scenario 'Sever'", "Did you mean 'Server'?"]),
        ("*.Offline.target_qsp = 5", ["'target_qsp' is not a LoadGen setting", "Did you mean 'target_qps'?"]),
        ("*.Offline.min_duration_ms = 5", ["'min_duration_ms' is not a LoadGen setting",
                                           "Did you mean 'min_duration'?"]),
        ("*.*.qsl_rng_seed = 1", ["'qsl_rng_seed' is fixed by the embedded mlperf.conf"]),
        ("*.*.schedule_rng_seed = 1", ["'schedule_rng_seed' is fixed"]),
        ("*.*.mode = 2", ["'mode' is chosen with --mode"]),
        ("*.Offline.target_qps = abc", ["the value 'abc' of 'target_qps' is not a number"]),
        ("*.Offline.target_qps = 12abc", ["not a number"]),
        ("target_qps = 5", ["expected 'model.scenario.key = value'", "found 'target_qps = 5'"]),
        ("*.Offline.target_qps 5", ["expected 'model.scenario.key = value'"]),
        ("*.Offline.target_qps = 5 6", ["expected 'model.scenario.key = value'"]),
        ("resnet50.Offline = 5", ["expected 'model.scenario.key = value'"]),
    ],
)
def test_bad_user_conf_line_names_file_and_line(tmp_path, line, needles):
    path = conf(tmp_path, "# my system", "", "*.Offline.min_query_count = 10  # fine", line)
    with pytest.raises(SettingsError) as ei:
        lgs.build_test_settings(plan(user_conf=path))
    msg = str(ei.value)
    assert f"{path}, line 4" in msg, msg
    for needle in needles:
        assert needle in msg, msg


def test_good_user_conf_lines_pass(tmp_path):
    path = conf(
        tmp_path,
        "# comment only",
        "resnet50.Offline.target_qps = 1234   # exact model",
        "*.Server.target_qps = 0x10",
        "*.*.min_query_count = 100",
        "resnet50.*.max_query_count = 7",
    )
    assert [k for _, _, _, k, _ in lgs.validate_user_conf(path, "resnet50")] == [
        "target_qps", "target_qps", "min_query_count", "max_query_count"]


def test_unreadable_user_conf(tmp_path):
    with pytest.raises(SettingsError, match="cannot read user.conf"):
        lgs.build_test_settings(plan(user_conf=tmp_path / "missing.conf"))


def test_project_user_confs_validate():
    root = USER_CONF_DIR
    confs = sorted(root.glob("*.conf"))
    assert confs
    for path in confs:
        model = path.stem if path.stem in lgs.known_models() else "anything"
        lgs.validate_user_conf(path, model)


# --------------------------------------------------------------------------- build_test_settings applies values


def test_user_conf_values_are_applied(tmp_path):
    base = lgs.build_test_settings(plan("Offline"))
    assert base.offline_expected_qps != 1234
    path = conf(tmp_path, "*.Offline.target_qps = 1234", "*.Offline.min_duration = 4321")
    s = lgs.build_test_settings(plan("Offline", path))
    assert s.offline_expected_qps == 1234
    assert s.min_duration_ms == 4321
    assert s.scenario == lg.TestScenario.Offline and s.mode == lg.TestMode.PerformanceOnly
    # the embedded conf's values for the model still apply where the user.conf says nothing
    assert s.min_query_count == base.min_query_count
    assert s.qsl_rng_seed == lgs.embedded_seeds()["qsl_rng_seed"]


def test_model_specific_embedded_values_apply():
    """resnet50 has its own Server latency bound in mlperf.conf: a plan for resnet50 gets it, a plain name not."""
    resnet = lgs.build_test_settings(plan("Server", model="resnet50"))
    other = lgs.build_test_settings(plan("Server", model="mymodel"))
    assert resnet.server_target_latency_ns == 15_000_000
    assert other.server_target_latency_ns != resnet.server_target_latency_ns


def test_more_specific_user_conf_line_wins(tmp_path):
    path = conf(tmp_path, "*.*.max_query_count = 1", "*.Offline.max_query_count = 2",
                "resnet50.Offline.max_query_count = 3")
    assert lgs.build_test_settings(plan("Offline", path)).max_query_count == 3
    assert lgs.build_test_settings(plan("Server", path)).max_query_count == 1


def test_mode_comes_from_the_plan(tmp_path):
    assert lgs.build_test_settings(plan(mode="accuracy")).mode == lg.TestMode.AccuracyOnly
    assert lgs.build_test_settings(plan(mode="performance")).mode == lg.TestMode.PerformanceOnly


def test_cli_overrides_apply_and_beat_user_conf(tmp_path):
    path = conf(tmp_path, "*.Offline.target_qps = 1234", "*.Server.target_qps = 99", "*.*.min_query_count = 5",
                "*.SingleStream.target_latency = 4", "*.MultiStream.target_latency = 40")
    s = lgs.build_test_settings(plan("Offline", path, min_duration_ms=250, min_query_count=7, max_query_count=70,
                                     performance_sample_count=64, target_qps=55.5))
    assert (s.min_duration_ms, s.min_query_count, s.max_query_count) == (250, 7, 70)
    assert s.performance_sample_count_override == 64
    assert s.offline_expected_qps == 55.5
    s = lgs.build_test_settings(plan("Server", path, target_qps=12.0, target_latency_ms=30))
    assert s.server_target_qps == 12.0 and s.server_target_latency_ns == 30_000_000
    s = lgs.build_test_settings(plan("SingleStream", path, target_latency_ms=2.5))
    assert s.single_stream_expected_latency_ns == 2_500_000
    s = lgs.build_test_settings(plan("MultiStream", path, target_latency_ms=50, samples_per_query=4))
    assert s.multi_stream_expected_latency_ns == 50_000_000 and s.multi_stream_samples_per_query == 4
    # and without overrides the user.conf values are the ones used
    s = lgs.build_test_settings(plan("Server", path))
    assert s.server_target_qps == 99 and s.min_query_count == 5


@pytest.mark.parametrize(
    ("scenario", "overrides", "needle"),
    [
        ("SingleStream", {"target_qps": 5.0}, "--target-qps applies to Offline and Server"),
        ("Offline", {"target_latency_ms": 5.0}, "--target-latency-ms does not apply to Offline"),
        ("Server", {"samples_per_query": 4}, "--samples-per-query applies to MultiStream only"),
        ("offline", {}, "Did you mean 'Offline'?"),
    ],
)
def test_override_misuse_is_refused(scenario, overrides, needle):
    with pytest.raises(SettingsError, match=needle.replace("?", r"\?")):
        lgs.build_test_settings(plan(scenario, **overrides))


# --------------------------------------------- every listed key really reaches TestSettings (installed LoadGen)

# key -> (scenario, extra user.conf lines the key needs, value written, TestSettings attribute, expected value)
KEY_PROBES: dict[str, list[tuple[str, tuple[str, ...], str, str, object]]] = {
    "accuracy_log_rng_seed": [("Offline", (), "3", "accuracy_log_rng_seed", 3)],
    "accuracy_log_sampling_target": [("Offline", (), "3", "accuracy_log_sampling_target", 3)],
    "accuracy_sample_count_override": [("Offline", (), "3", "accuracy_sample_count_override", 3)],
    "sample_concatenate_permutation": [("Offline", (), "1", "sample_concatenate_permutation", True)],
    "min_duration": [("Offline", (), "3", "min_duration_ms", 3), ("Server", (), "3", "min_duration_ms", 3)],
    "max_duration": [("Offline", (), "3", "max_duration_ms", 3)],
    "min_query_count": [("Offline", (), "3", "min_query_count", 3), ("SingleStream", (), "3", "min_query_count", 3)],
    "max_query_count": [("Offline", (), "3", "max_query_count", 3)],
    "performance_issue_unique": [("Offline", (), "1", "performance_issue_unique", True)],
    "performance_issue_same": [("Offline", (), "1", "performance_issue_same", True)],
    "performance_issue_same_index": [("Offline", (), "3", "performance_issue_same_index", 3)],
    "performance_sample_count_override": [("Offline", (), "3", "performance_sample_count_override", 3)],
    "print_timestamps": [("Offline", (), "1", "print_timestamps", True)],
    "target_qps": [("Offline", (), "1234", "offline_expected_qps", 1234.0),
                   ("Server", (), "1234", "server_target_qps", 1234.0)],
    "target_latency": [("SingleStream", (), "3", "single_stream_expected_latency_ns", 3_000_000),
                       ("MultiStream", (), "3", "multi_stream_expected_latency_ns", 3_000_000),
                       ("Server", (), "3", "server_target_latency_ns", 3_000_000)],
    "target_latency_percentile": [("SingleStream", (), "95", "single_stream_target_latency_percentile", 0.95),
                                  ("MultiStream", (), "95", "multi_stream_target_latency_percentile", 0.95),
                                  ("Server", (), "95", "server_target_latency_percentile", 0.95)],
    "samples_per_query": [("MultiStream", (), "3", "multi_stream_samples_per_query", 3)],
    "max_async_queries": [("Server", (), "3", "server_max_async_queries", 3)],
    "coalesce_queries": [("Server", (), "1", "server_coalesce_queries", True)],
    "use_token_latencies": [("Server", (), "1", "use_token_latencies", True)],
    "ttft_latency": [("Server", ("*.*.use_token_latencies = 1",), "7", "ttft_latency", 7_000_000)],
    "tpot_latency": [("Server", ("*.*.use_token_latencies = 1",), "7", "tpot_latency", 7_000_000)],
    "infer_token_latencies": [("Offline", (), "1", "infer_token_latencies", True)],
    "token_latency_scaling_factor": [("Offline", ("*.*.infer_token_latencies = 1",), "7",
                                      "token_latency_scaling_factor", 7)],
}
# listed so that validation can explain them, but refused in a user.conf (and LoadGen reads none of them there)
REFUSED_KEYS = lgs.SEED_KEYS | {"mode"}


def test_every_accepted_key_has_a_probe():
    """A key accepted in a user.conf but never shown to reach TestSettings fails here: add a probe, or remove the
    key from LOADGEN_CONF_KEYS if LoadGen ignores it."""
    accepted = lgs.LOADGEN_CONF_KEYS - REFUSED_KEYS
    assert accepted - set(KEY_PROBES) == set(), "keys without a probe"
    assert set(KEY_PROBES) - lgs.LOADGEN_CONF_KEYS == set(), "probes for keys that are not listed"


@pytest.mark.parametrize("key", sorted(KEY_PROBES))
def test_accepted_key_changes_testsettings(tmp_path, key):
    for scenario, extra, value, attr, expected in KEY_PROBES[key]:
        baseline = getattr(lgs.build_test_settings(plan(scenario)), attr)
        assert baseline != pytest.approx(expected), f"probe for {key} must use a non-default value"
        path = conf(tmp_path, *extra, f"*.{scenario}.{key} = {value}", name=f"{key}-{scenario}.conf")
        got = getattr(lgs.build_test_settings(plan(scenario, path)), attr)
        assert got == pytest.approx(expected), f"{key} in a {scenario} user.conf did not reach {attr}: {got!r}"


def _loadgen_reads(key: str, scenario: str, value: str, tmp_path: Path) -> dict:
    """What changes when LoadGen itself reads ``*.<scenario>.<key> = value`` as a user.conf (no validation)."""
    def settings(path: Path | None):
        s = lg.TestSettings()
        s.scenario = getattr(lg.TestScenario, scenario)
        assert s.FromConfig("", "resnet50", scenario, 0) == 0
        if path is not None:
            assert s.FromConfig(str(path), "resnet50", scenario, 2) == 0
        return lgs.describe_settings(s)

    before = settings(None)
    after = settings(conf(tmp_path, f"*.{scenario}.{key} = {value}", name=f"raw-{key}.conf"))
    return {k: (before[k], after[k]) for k in before if before[k] != after[k]}


@pytest.mark.parametrize("key", ["test05", "target_duration", "server_num_issue_query_threads"])
def test_keys_loadgen_ignores_are_refused(tmp_path, key):
    """LoadGen 6.0.17 silently ignores these in a user.conf, so mlharness must refuse them."""
    for scenario in ("Offline", "Server"):
        assert _loadgen_reads(key, scenario, "5", tmp_path) == {}
    assert key not in lgs.LOADGEN_CONF_KEYS
    path = conf(tmp_path, f"*.Server.{key} = 5")
    with pytest.raises(SettingsError, match="is not a LoadGen setting"):
        lgs.build_test_settings(plan("Server", path))


@pytest.mark.parametrize("key", sorted(lgs.SEED_KEYS))
def test_seed_keys_are_ignored_by_loadgen_in_user_conf_and_refused(tmp_path, key):
    assert _loadgen_reads(key, "Offline", "5", tmp_path) == {}
    with pytest.raises(SettingsError, match="fixed by the embedded mlperf.conf"):
        lgs.validate_user_conf(conf(tmp_path, f"*.*.{key} = 5"), "resnet50")


def test_mode_in_user_conf_would_be_overridden_so_it_is_refused(tmp_path):
    assert _loadgen_reads("mode", "Offline", "2", tmp_path) == {}  # PerformanceOnly is already the default
    assert _loadgen_reads("mode", "Offline", "1", tmp_path) == {"mode": ("PerformanceOnly", "AccuracyOnly")}
    with pytest.raises(SettingsError, match="'mode' is chosen with --mode"):
        lgs.build_test_settings(plan("Offline", conf(tmp_path, "*.*.mode = 1"), mode="performance"))


# ----------------------------------------------------------------------------------------------------- CLI


def test_cli_unknown_scenario_exits_2_with_suggestion(tmp_path):
    r = cli(tmp_path, "run", "--scenario", "offline", "--no-progress", "--output", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    assert "did you mean 'offline'" in r.stderr.lower()
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_cli_refuses_unknown_mlperf_model(tmp_path):
    manifest = echo_manifest(tmp_path, mlperf_model="resnet")
    r = cli(tmp_path, "run", "--manifest", str(manifest), "--scenario", "Offline", "--no-progress",
            "--output", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    assert "'resnet' is not in the mlperf.conf" in r.stderr
    assert "Did you mean 'resnet50'?" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_cli_resnet50_accepted_and_overrides_make_it_not_submittable(tmp_path):
    manifest = echo_manifest(tmp_path, mlperf_model="resnet50")
    user_conf = conf(tmp_path, "*.Offline.target_qps = 1234")
    out = tmp_path / "o"
    r = cli(tmp_path, "run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy",
            "--count", "16", "--min-duration-ms", "50", "--user-conf", str(user_conf), "--no-progress",
            "--output", str(out))
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["conf_model"] == "resnet50" and meta["official_benchmark"] is True
    assert meta["submittable"] is False
    reasons = " | ".join(meta["not_submittable_reasons"])
    assert "--count 16 limits the dataset" in reasons
    assert "min_duration_ms=50" in reasons
    assert meta["overrides"] == {"min_duration_ms": 50}
    assert meta["settings"]["offline_expected_qps"] == 1234.0  # the user.conf reached LoadGen
    assert meta["settings"]["min_duration_ms"] == 50
    assert meta["user_conf"] == str(user_conf)
    assert "submittable" in r.stdout


AUDIT_CONFIG = """\
# a TEST01-like audit config left in the working directory
*.*.mode = 2
*.*.accuracy_log_rng_seed = 720381539243781796
*.*.accuracy_log_sampling_target = 8
*.*.min_query_count = 1
"""


def test_stray_audit_config_in_cwd_is_ignored(tmp_path):
    manifest = echo_manifest(tmp_path)
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "audit.config").write_text(AUDIT_CONFIG)
    common = ["run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--count", "16",
              "--min-duration-ms", "50", "--no-progress"]

    r = cli(tmp_path, *common, "--output", str(tmp_path / "plain"), cwd=cwd)
    assert r.returncode == 0, r.stderr
    detail = detail_values(tmp_path / "plain" / "mlperf_log_detail.txt")
    assert detail["requested_test_mode"] == "AccuracyOnly"
    assert detail["effective_test_mode"] == "AccuracyOnly"
    assert detail["effective_accuracy_log_sampling_target"] == 0
    meta = json.loads((tmp_path / "plain" / "mlharness_run.json").read_text())
    assert meta["audit_config"] is None
    entries = json.loads((tmp_path / "plain" / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(16))  # a whole accuracy pass, not a sample

    # control: the same file named explicitly does turn the run into a compliance (performance) run
    r = cli(tmp_path, *common, "--audit-config", "audit.config", "--output", str(tmp_path / "audited"), cwd=cwd)
    assert r.returncode == 0, r.stderr
    detail = detail_values(tmp_path / "audited" / "mlperf_log_detail.txt")
    assert detail["effective_test_mode"] == "PerformanceOnly"
    assert detail["effective_accuracy_log_sampling_target"] == 8


def test_test05_audit_config_switches_to_the_alternate_seeds(run_cli, tmp_path):
    """LoadGen 6.0.x ignores 'test05' in an audit config; mlharness applies it, so the run uses the embedded
    test05_* seeds (and a normal run does not)."""
    audit = AUDIT_DIR / "TEST05" / "audit.config"
    seeds = lgs.embedded_seeds()
    for extra, expected in (([], seeds["qsl_rng_seed"]), (["--audit-config", str(audit)],
                                                            seeds["test05_qsl_rng_seed"])):
        out = tmp_path / ("audit" if extra else "plain")
        proc = run_cli("run", "--scenario", "Offline", "--mode", "performance", "--count", "32",
                       "--min-duration-ms", "50", "--target-qps", "1000", "--output", str(out), "--no-progress",
                       *extra)
        assert proc.returncode == 0, proc.stderr
        assert detail_values(out / "mlperf_log_detail.txt")["effective_qsl_rng_seed"] == expected
