"""Rounds know their suite; built-in variants file their results under the official benchmark ID; development runs
of generative models stay short.

- A round lists the benchmark IDs of its official checker (``MODEL_CONFIG[<round>]["models"]``, typed in here
  independently of mlharness/rounds.py). ``run`` and ``submission run`` refuse a benchmark the round lacks
  (retinanet in v6.1) with exit 2 and the rounds that have it, before anything loads; ``--round v6.0`` runs it.
  ``submission check`` of a round reports a benchmark folder that round does not have.
- ``llama3.1-8b-oracle`` writes ``llama3.1-8b/`` (the variant stays recorded in the scenario's README and the
  run's metadata); its datacenter tree with Offline and Interactive only (no Server) checks with development
  findings only, and the strict check reports exactly those findings.
- ``llama3.1-8b-random`` Offline performance with ``--min-duration-ms 2000`` issues a calibrated handful of
  samples, not the 13,368 of mlperf.conf, and names the flag that restores the official count; a run at the
  official duration keeps it.

With ``MLHARNESS_INFERENCE_REPO`` naming a checkout of mlcommons/inference (and PyYAML importable), the official
submission checker also reads the llama3.1-8b tree without failing and reports the same findings.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mlharness.calibration import calibrate_dev
from mlharness.errors import SettingsError
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import detail_values
from mlharness.manifest.loader import load_manifest
from mlharness.paths import MANIFESTS_DIR
from mlharness.rounds import MLPERF_BENCHMARKS, ROUNDS, check_in_suite, rounds_with
from mlharness.submission.checker import check
from mlharness.submission.layout import Tree
from mlharness.submission.round_check import round_to_package
from mlharness.submission.rules import ROUND_RULES
from tests.helpers.cli import cli

# MODEL_CONFIG[<round>]["models"] of tools/submission/submission_checker/constants.py (mlcommons/inference b66003e1)
OFFICIAL_SUITES = {
    "v6.0": {"resnet", "retinanet", "bert-99", "bert-99.9", "3d-unet-99", "3d-unet-99.9", "llama3.1-8b",
             "llama3.1-8b-edge", "llama2-70b-99", "llama2-70b-99.9", "stable-diffusion-xl", "mixtral-8x7b",
             "llama3.1-405b", "rgat", "pointpainting", "deepseek-r1", "whisper", "gpt-oss-120b", "wan-2.2-t2v-a14b",
             "qwen3-vl-235b-a22b", "dlrm-v3", "yolo-95", "yolo-99"},
    "v6.1": {"resnet", "bert-99", "bert-99.9", "3d-unet-99", "3d-unet-99.9", "llama3.1-8b", "llama3.1-8b-edge",
             "llama2-70b-99.9", "stable-diffusion-xl", "rgat", "deepseek-r1", "whisper", "gpt-oss-120b",
             "wan-2.2-t2v-a14b", "qwen3-vl-235b-a22b", "qwen3.6-27b", "dlrm-v3", "yolo-95", "yolo-99", "e2e-rag-qna",
             "e2e-rag-db"},
}
OVERRIDES = {"status": "available", "system_type": "datacenter", "cooling": "air",
             "host_memory_configuration": "1x 24 GB", "host_networking_topology": "N/A",
             "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}
SYSTEM = "box"
TOLERATED = " (tolerated: --allow-development)"


# ---------------------------------------------------------------------------------------------- the suites
def test_each_round_lists_its_checkers_benchmarks():
    for name, suite in OFFICIAL_SUITES.items():
        assert set(ROUNDS[name].benchmarks) == suite, name
    assert len(ROUNDS["v6.1"].benchmarks) == 21
    assert rounds_with("retinanet") == ["v6.0"] and rounds_with("resnet") == ["v6.0", "v6.1"]
    for gone in ("retinanet", "llama2-70b-99", "mixtral-8x7b", "llama3.1-405b", "pointpainting"):
        assert gone in MLPERF_BENCHMARKS and gone not in ROUNDS["v6.1"].benchmarks
    # the checker's rules of a round hold that round's benchmarks only
    assert "retinanet" in ROUND_RULES["v6.0"].benchmarks and "retinanet" not in ROUND_RULES["v6.1"].benchmarks
    assert "retinanet" not in ROUND_RULES["v6.1"].required_scenarios["datacenter,edge"]


def test_a_round_refuses_the_benchmarks_it_lacks_only():
    with pytest.raises(SettingsError, match=r"^m\.yaml: retinanet is not a benchmark of MLPerf Inference round "
                                            r"v6\.1 .*round v6\.0 has it: pass --round v6\.0$"):
        check_in_suite("v6.1", "retinanet", "m.yaml")
    with pytest.raises(SettingsError, match=r"llama2-70b-99 is not a benchmark of .* round v6\.1"):
        check_in_suite(None, "llama2-70b-99")  # the default round is v6.1
    check_in_suite("v6.0", "retinanet")
    check_in_suite("v6.1", "resnet")
    check_in_suite("v6.1", "my-detector")  # not an MLPerf benchmark: an open-division model, never refused
    check_in_suite("v6.1", None)


@pytest.mark.parametrize("argv", [
    ("run", "--manifest", "retinanet-oracle", "--scenario", "Offline", "--mode", "accuracy", "--round", "v6.1"),
    ("submission", "run", "--manifest", "retinanet-oracle", "--scenarios", "Offline", "--division", "open",
     "--submitter", "Acme", "--round", "v6.1"),
])
def test_v61_run_of_retinanet_is_refused_naming_v60(env, tmp_path, argv):
    where = ["--output", str(tmp_path / "out")] if argv[0] == "run" else ["--results", str(tmp_path / "results")]
    proc = cli(env, *argv, *where, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "retinanet is not a benchmark of MLPerf Inference round v6.1" in proc.stderr
    assert "round v6.0 has it: pass --round v6.0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()  # refused before anything


@pytest.mark.slow
def test_v60_runs_retinanet(env, tmp_path):
    data = tmp_path / "openimages"
    assert cli(env, "dataset", "synth", "openimages", "--out", str(data), "--count", "4").returncode == 0
    out = tmp_path / "acc"
    proc = cli(env, "run", "--manifest", "retinanet-oracle", "--dataset-path", str(data), "--scenario", "Offline",
               "--mode", "accuracy", "--output", str(out), "--no-progress", "--round", "v6.0", timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert (out / "accuracy.txt").read_text().startswith("mAP=100.000%")
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["round"] == "v6.0" and meta["benchmark"] == "retinanet"


def test_check_reports_a_benchmark_folder_the_round_lacks(tmp_path):
    sub = tmp_path / "pkg" / "open" / "Acme"
    (sub / "results" / SYSTEM / "retinanet" / "Offline").mkdir(parents=True)
    (sub / "src").mkdir()
    (sub / "src" / "README.md").write_text("code\n")
    (sub / "systems").mkdir()
    (sub / "systems" / f"{SYSTEM}.json").write_text(json.dumps({"division": "open", "submitter": "Acme"}))
    wanted = "retinanet is not a benchmark of round v6.1; round(s) v6.0 have it: check with their --round"
    v61 = check(tmp_path / "pkg", allow_development=True, round_name="v6.1")
    assert any(f.level == "error" and f.message == wanted for f in v61.findings), v61.findings
    v60 = check(tmp_path / "pkg", allow_development=True, round_name="v6.0")
    assert not any("is not a benchmark of round" in f.message for f in v60.findings)


@pytest.mark.parametrize("bench, division, refused", [
    ("retinanet", "open", r"retinanet is not a benchmark of MLPerf Inference round v6\.1 .*round v6\.0 has it"),
    ("llama3.1-8b-oracle", "closed", r"'llama3\.1-8b-oracle' is not a benchmark ID of round v6\.1, so the "
                                     r"official checker cannot read its results in the closed division"),
    ("llama3.1-8b-oracle", "open", None),  # the open division maps it through model_mapping.json
    ("llama3.1-8b", "closed", None),
])
def test_package_refuses_folders_the_rounds_checker_cannot_read(tmp_path, bench, division, refused):
    (tmp_path / SYSTEM / bench / "Offline").mkdir(parents=True)
    tree, state = Tree(tmp_path), {"division": division, "round": "v6.1"}
    if refused is None:
        assert round_to_package(tree, state, None) == "v6.1"
    else:
        with pytest.raises(SettingsError, match=refused):
            round_to_package(tree, state, None)


# ------------------------------------------------------------------------ llama3.1-8b-oracle development tree
@pytest.fixture(scope="module")
def llm_tree(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """llama3.1-8b-oracle, datacenter, Offline and Interactive (no Server), short runs; packaged."""
    work = tmp_path_factory.mktemp("llm-suite")
    overrides = work / "system.yaml"
    overrides.write_text(yaml.safe_dump(OVERRIDES))
    results, package = work / "results", work / "package"
    proc = cli(env, "submission", "run", "--manifest", "llama3.1-8b-oracle", "--scenarios", "Offline",
               "Interactive", "--division", "open", "--submitter", "Acme", "--system-name", SYSTEM,
               "--results", str(results), "--system-overrides", str(overrides), "--min-duration-ms", "1000",
               timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = cli(env, "submission", "package", "--results", str(results), "--out", str(package))
    assert proc.returncode == 0, proc.stderr
    return {"results": results, "package": package}


@pytest.mark.slow
def test_oracle_results_go_under_the_official_id_and_name_the_variant(llm_tree):
    bench = llm_tree["results"] / SYSTEM
    assert sorted(p.name for p in bench.iterdir()) == ["llama3.1-8b"]
    assert sorted(p.name for p in (bench / "llama3.1-8b").iterdir()) == ["Interactive", "Offline"]
    for scenario in ("Offline", "Interactive"):
        readme = (bench / "llama3.1-8b" / scenario / "README.md").read_text()
        assert "Model: `llama3.1-8b-oracle` (mlharness manifest), submitted as the benchmark `llama3.1-8b`" in readme
    runs = llm_tree["results"] / ".mlharness" / "runs" / SYSTEM / "llama3.1-8b"
    metas = [json.loads(p.read_text()) for p in runs.rglob("mlharness_run.json")]
    assert metas and {m["manifest"]["name"] for m in metas} == {"llama3.1-8b-oracle"}
    assert {m["benchmark"] for m in metas} == {"llama3.1-8b"}
    pkg = llm_tree["package"] / "open" / "Acme" / "results" / SYSTEM
    assert sorted(p.name for p in pkg.iterdir()) == ["llama3.1-8b"]


@pytest.mark.slow
def test_another_variant_cannot_share_the_benchmark_folder(llm_tree, env):
    before = sorted(p.relative_to(llm_tree["results"]) for p in llm_tree["results"].rglob("*"))
    proc = cli(env, "submission", "run", "--manifest", "llama3.1-8b-random", "--scenarios", "Server",
               "--division", "open", "--submitter", "Acme", "--system-name", SYSTEM, "--results",
               str(llm_tree["results"]), "--min-duration-ms", "1000")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "holds llama3.1-8b results of the manifest 'llama3.1-8b-oracle', not 'llama3.1-8b-random'" in proc.stderr
    assert sorted(p.relative_to(llm_tree["results"]) for p in llm_tree["results"].rglob("*")) == before


def _findings(stdout: str, level: str) -> set[str]:
    return {line.removeprefix(f"{level} ").removesuffix(TOLERATED) for line in stdout.splitlines()
            if line.startswith(f"{level} ")}


@pytest.mark.slow
def test_offline_plus_interactive_checks_with_development_findings_only(llm_tree, env):
    lenient = cli(env, "submission", "check", str(llm_tree["package"]), "--allow-development")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert "PASSED: 0 problem(s)" in lenient.stdout
    assert "missing required scenario" not in lenient.stdout  # Interactive stands in for Server (#2654)
    tolerated = _findings(lenient.stdout, "WARNING")
    assert tolerated and all(line.endswith(TOLERATED) for line in lenient.stdout.splitlines()
                             if line.startswith("WARNING "))
    strict = cli(env, "submission", "check", str(llm_tree["package"]))
    assert strict.returncode == 2 and _findings(strict.stdout, "ERROR") == tolerated, strict.stdout
    kinds = {re.sub(r"^\S+: ", "", f).split(";")[0].split(" (")[0] for f in tolerated}
    expected = {"the accuracy run covers 64 samples", "performance_sample_count is 64",
                "Test duration less than 600s in user config. expected=600000, found=1000"}
    # the Offline query's size follows the calibrated rate: a short run sends fewer samples than mlperf.conf's
    # min_query_count, which the checker does not hold it to (its min-queries row is 1, held against the stated
    # count), so neither does mlharness
    assert kinds == expected, kinds


def _official_checker() -> Path | None:
    repo = os.environ.get("MLHARNESS_INFERENCE_REPO")
    if not repo or not importlib.util.find_spec("yaml"):
        return None
    tool = Path(repo) / "tools" / "submission"
    return tool if (tool / "submission_checker" / "main.py").is_file() else None


@pytest.mark.skipif(_official_checker() is None, reason="MLHARNESS_INFERENCE_REPO names no mlcommons/inference "
                                                        "checkout")
def test_suites_match_the_checkouts_constants():
    spec = importlib.util.spec_from_file_location(
        "official_constants", _official_checker() / "submission_checker" / "constants.py")
    constants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(constants)  # plain data: no imports
    for name, r in ROUNDS.items():
        assert set(r.benchmarks) == set(constants.MODEL_CONFIG[name]["models"]), name


@pytest.mark.slow
@pytest.mark.skipif(_official_checker() is None, reason="MLHARNESS_INFERENCE_REPO names no mlcommons/inference "
                                                        "checkout")
def test_official_checker_reads_the_tree_and_finds_the_same(llm_tree):
    proc = subprocess.run([sys.executable, "-m", "submission_checker.main", "--input", str(llm_tree["package"]),
                           "--version", "v6.1"], capture_output=True, text=True, timeout=120,
                          cwd=_official_checker())
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "SUMMARY: submission has errors" in out, out[-3000:]
    errors = [re.sub(r"^\[[^]]*\] ", "", line) for line in out.splitlines() if " ERROR] " in line]
    found = {e.split("mlperf_log_detail.txt ", 1)[-1] for e in errors if "/llama3.1-8b/" in e}
    for scenario in ("Offline", "Interactive"):
        assert any(f"/llama3.1-8b/{scenario}/" in e for e in errors)
    assert {"performance_sample_count, found 64, needs to be >= 13368",
            "Test duration less than 600s in user config. expected=600000, found=1000",
            "accurcy run does not cover all dataset, accuracy samples: 64, dataset size: 13368"} <= found, found
    assert not any("scenario" in e.lower() for e in errors), errors  # Offline + Interactive is a valid set


# --------------------------------------------------------------------------- short generative development runs
def _plan(min_duration_ms: int | None = 2000, **overrides) -> lgs.SettingsPlan:
    return lgs.SettingsPlan(model="llama3_1-8b", official=True, scenario="Offline", mode="performance",
                            user_conf=None, overrides=lgs.Overrides(min_duration_ms=min_duration_ms, **overrides),
                            audit_config=None, token_latencies=True)


def test_development_sizing_follows_the_expected_rate():
    plan = _plan()
    settings = lgs.build_test_settings(plan)
    assert int(settings.min_query_count) == 13368  # mlperf.conf: the whole dataset
    settings.offline_expected_qps = 100.0
    sized = calibrate_dev.size(plan, settings, 13368, floor=16)
    assert int(settings.min_query_count) == 220 == int(settings.performance_sample_count_override)  # 1.1 x 2 s x 100
    assert sized["restore"] == "--min-query-count 13368" and sized["message"] in plan.not_submittable
    slow = _plan()
    settings = lgs.build_test_settings(slow)
    settings.offline_expected_qps = 0.5  # one sample: the floor (the calibration burst) keeps the run long enough
    calibrate_dev.size(slow, settings, 64, floor=16)
    assert int(settings.min_query_count) == 16 == int(settings.performance_sample_count_override)


@pytest.mark.parametrize("plan", [
    _plan(None),  # submission grade: the official duration
    _plan(600_000),
    _plan(2000, min_query_count=13368),  # the flag that restores the official count
    _plan(2000, performance_sample_count=64),
], ids=["official", "official-duration", "min-query-count", "performance-sample-count"])
def test_official_counts_stay_unless_a_development_duration_alone(plan):
    settings = lgs.build_test_settings(plan)
    before = (int(settings.min_query_count), int(settings.performance_sample_count_override))
    settings.offline_expected_qps = 100.0
    assert calibrate_dev.size(plan, settings, 13368, floor=16) is None
    assert (int(settings.min_query_count), int(settings.performance_sample_count_override)) == before


@pytest.mark.slow
def test_random_llama_offline_development_run_is_short(env, tmp_path):
    # the built-in manifest with shorter answers (16 new tokens, not 128): the same sizing, an eighth of the time
    doc = yaml.safe_load((MANIFESTS_DIR / "llama3.1-8b" / "llama3.1-8b-random.yaml").read_text())
    doc["generation"]["max_new_tokens"] = 16
    manifest = tmp_path / "llama3.1-8b-random.yaml"  # the same name: the same generated model in the cache
    manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "perf"
    start = time.monotonic()
    proc = cli(env, "run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "performance",
               "--min-duration-ms", "2000", "--output", str(out), "--no-progress", timeout=240)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout + proc.stderr
    assert "--min-query-count 13368 restores the official count" in text, text
    planned = int(re.search(r"LoadGen will issue 1 query of ([\d,]+) samples", text).group(1).replace(",", ""))
    detail = detail_values(out / "mlperf_log_detail.txt")
    meta = json.loads((out / "mlharness_run.json").read_text())
    # LoadGen's own Offline count at the calibrated rate (1.1 x min_duration x expected QPS), 16 at least
    rate = meta["calibration"]["value"]
    assert planned == max(16, int(1.1 * 2.0 * rate)) < 13368
    loaded = detail["effective_performance_sample_count"]
    assert loaded <= 64  # the synthetic set has 64
    # sample_concatenate_permutation pads the query to whole rounds of the loaded samples
    assert meta["samples"]["issued"] == -(-planned // loaded) * loaded
    assert meta["calibration"]["development_sizing"]["min_query_count"] == [13368, planned]
    # the first run also builds the random model and its tokenizer (about 10 s); the run itself takes seconds
    assert seconds < 90, seconds


def test_builtin_variants_name_the_official_benchmark():
    for path in sorted(MANIFESTS_DIR.glob("*/*.yaml")):
        if path.parent.name in ("datasets", "demo"):
            continue
        m = load_manifest(str(path)).model
        if m.mlperf.model is not None:
            assert m.mlperf.benchmark in MLPERF_BENCHMARKS, f"{path.name}: {m.mlperf.benchmark}"
