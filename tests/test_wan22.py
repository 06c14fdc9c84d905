"""wan-2.2-t2v-a14b: video responses through LoadGen (the oracle scores exactly the stand-ins' maximum; the random
Wan pipeline is VALID Offline and SingleStream with only --min-duration-ms), the VBench aggregation equal to
run_evaluation.py's on the same per-dimension scores, and bad videos refused with exit 2 naming entry, sample and
field. With the stand-in scorers an oracle is the model whose every video equals its prompt's reference video:
each stand-in dimension scores 1 / (1 + distance to the reference's statistic), so 1 exactly on every dimension,
a vbench_score of 100, and less for any other video."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlharness.manifest.loader import find_builtin
from mlharness.tasks.wan22.metric import STAND_IN_NOTE, summary

FIXTURES = Path(__file__).parent / "fixtures" / "wan22"
# a git repository of mlcommons/inference (bare or not): MLHARNESS_INFERENCE_GIT, else where this machine mirrors it
OFFICIAL = Path(os.environ.get("MLHARNESS_INFERENCE_GIT", "/work/.mirror/mlcommons+inference/repo"))
SHAPE = [5, 32, 32, 3]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from mlharness.cli import main

    out = tmp_path_factory.mktemp("vbench") / "ds"
    assert main(["dataset", "synth", "vbench-prompts", "--out", str(out), "--count", "3"]) == 0
    return out


def test_oracle_scores_exactly_the_maximum(dataset, tmp_path, run_cli):
    proc = run_cli("run", "--manifest", str(find_builtin("wan-2.2-t2v-a14b-oracle")), "--dataset-path",
                   str(dataset), "--scenario", "Offline", "--mode", "accuracy", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run = tmp_path / "default" / "wan-2.2-t2v-a14b" / "Offline" / "accuracy"
    text = (run / "accuracy.txt").read_text()
    assert text.startswith(STAND_IN_NOTE)  # said plainly: not a VBench score
    assert text.rstrip().endswith("Accuracy Results: {'vbench_score': 100.0}")  # the checker's 0-100 scale
    # the official parse_results' bytes, then our line: it prints the 0-1 average and no vbench_score
    official, _ = summary(json.loads((run / "vbench" / "results_mlharness_eval_results.json").read_text()),
                          "vbench/results_mlharness_eval_results.json")  # relative: the run folder moves
    assert "\n" + "\n".join(official) + "\nAccuracy Results: " in text
    assert "  Overall Average               : 1.0000\n" in text
    results = json.loads((run / "vbench" / "results_mlharness_eval_results.json").read_text())
    assert sorted(results) == sorted(["subject_consistency", "dynamic_degree", "motion_smoothness",
                                      "appearance_style", "scene", "background_consistency"])
    assert all(v[0] == 1.0 and len(v[1]) == 3 for v in results.values())


@pytest.mark.parametrize("scenario", ["SingleStream", "Offline"])
def test_random_wan_pipeline_is_valid(dataset, tmp_path, run_cli, scenario):
    proc = run_cli("run", "--manifest", str(find_builtin("wan-2.2-t2v-a14b-random")), "--dataset-path",
                   str(dataset), "--scenario", scenario, "--mode", "performance", "--min-duration-ms", "500",
                   "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    summary_txt = next(tmp_path.rglob("mlperf_log_summary.txt")).read_text()
    assert "Result is : VALID" in summary_txt


def test_aggregation_equals_run_evaluation_on_the_same_scores():
    results = json.loads((FIXTURES / "results_stand-in_eval_results.json").read_text())
    lines, overall = summary(results, "results_stand-in_eval_results.json")  # the path as it was run
    official = (FIXTURES / "official_output.txt").read_text()
    assert "\n".join(lines) + "\n" == official  # byte for byte, the closing blank line included
    assert 0 < overall < 1  # a non-oracle log, on VBench's 0-1 scale as the official prints it


@pytest.mark.skipif(not OFFICIAL.exists(), reason="the mlcommons/inference mirror is not on this machine")
def test_aggregation_equals_the_official_code_run_now(tmp_path):
    """The official parse_results, extracted from the mirror, over stand-in scores with a tie, a bool and a
    non-list value, as its loop treats them."""
    script = subprocess.run(["git", "-C", str(OFFICIAL), "show", "HEAD:text_to_video/wan-2.2-t2v-a14b/"
                             "run_evaluation.py"], capture_output=True, text=True, timeout=30, check=True).stdout
    (tmp_path / "run_evaluation.py").write_text(script)
    results = {"scene": [0.25, []], "dynamic_degree": [True, []], "subject_consistency": [0.912345, [1]],
               "appearance_style": "n/a", "motion_smoothness": [0.98765, []]}
    (tmp_path / "results_x_eval_results.json").write_text(json.dumps(results))
    out = subprocess.run([sys.executable, "-c", "import run_evaluation; run_evaluation.parse_results('.')"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=30, check=True).stdout
    lines, overall = summary(results, Path("results_x_eval_results.json"))
    assert "\n".join(lines) + "\n" == out
    assert f"{overall:6.4f}" in out


def _log(path: Path, data: bytes, idx: int = 1) -> Path:
    path.write_text(json.dumps([{"seq_id": 0, "qsl_idx": idx, "data": data.hex().upper()}]))
    return path


@pytest.mark.parametrize("dtype,frames,message", [
    ("float32", np.full(SHAPE, np.nan, np.float32), r"qsl_idx 1\), field 'data': the video holds 15360 non-finite"),
    ("uint8", np.zeros([4, 32, 32, 3], np.uint8), r"qsl_idx 1\), field 'data': 12288 bytes; a video response is "
                                                  r"15360 bytes"),
])
def test_bad_video_is_refused_with_exit_2(dataset, tmp_path, run_cli, dtype, frames, message):
    log = _log(tmp_path / "mlperf_log_accuracy.json", frames.tobytes())
    proc = run_cli("accuracy", "wan22", "--log", str(log), "--dataset-path", str(dataset), "--video-shape",
                   *map(str, SHAPE), "--dtype", dtype)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert str(log) in proc.stderr and re.search(message, proc.stderr), proc.stderr


def test_a_manifest_without_fps_is_refused(tmp_path, dataset, run_cli):
    text = find_builtin("wan-2.2-t2v-a14b-oracle").read_text().replace("  fps: 16\n", "")
    manifest = tmp_path / "oracle.yaml"
    manifest.write_text(text)
    proc = run_cli("run", "--manifest", str(manifest), "--dataset-path", str(dataset), "--scenario", "Offline",
                   "--mode", "accuracy", "--results", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "field 'response'" in proc.stderr and "fps" in proc.stderr
