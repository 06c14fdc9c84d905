"""stable-diffusion-xl end to end: the oracle's image responses through LoadGen (Offline, SingleStream), their
accuracy log truncated for a submission, and the checker's two-sided CLIP and FID windows."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from mlharness.manifest.loader import find_builtin
from mlharness.rounds import ROUNDS
from mlharness.submission.checker import check
from mlharness.submission.package import truncate_accuracy_log
from mlharness.submission.rules import (
    ACCURACY_WINDOWS,
    MAX_ACCURACY_LOG_SIZE,
    SYSTEM_DESC_REQUIRED_FIELDS,
    compliance_tests_for_model,
)
from mlharness.tasks.coco_t2i.clip_net import VOCAB_FILE
from tests.helpers.loadgen_logs import write_run

spec = importlib.util.find_spec("open_clip")
HAS_VOCAB = bool(spec and any((Path(p) / VOCAB_FILE).is_file() for p in spec.submodule_search_locations or []))
needs_vocab = pytest.mark.skipif(not HAS_VOCAB, reason="CLIP's BPE vocabulary comes from open-clip-torch "
                                                       "(pip install --no-deps open-clip-torch)")
ORACLE = find_builtin("stable-diffusion-xl-oracle")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from mlharness.cli import main

    out = tmp_path_factory.mktemp("coco_captions") / "ds"
    args = ["dataset", "synth", "coco-captions", "--out", str(out), "--count", "3", "--stand-in-networks"]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def manifest(dataset) -> Path:
    """The oracle scoring with the set's stand-in networks (the official weights cannot be downloaded here)."""
    text = ORACLE.read_text()
    assert "    statistics: val2014.npz\n" in text
    path = dataset.parent / "oracle.yaml"
    stats = "    statistics: val2014.npz\n"
    path.write_text(text.replace(stats, stats + "    networks: networks\n"))
    return path


def figures(accuracy_txt: Path) -> dict[str, float]:
    line = accuracy_txt.read_text()
    assert line.startswith("Accuracy Results: {'FID_SCORE': '"), line
    return {k: float(v) for k, v in re.findall(r"'(\w+_SCORE)': '([-\d.e]+)'", line)}


@pytest.mark.slow
@needs_vocab
def test_oracle_images_score_fid_zero(run_cli, dataset, manifest, tmp_path):
    from mlharness.tasks.coco_t2i.dataset import caption_set

    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", str(manifest), "--dataset-path", str(dataset), "--scenario", "Offline",
                   "--mode", "accuracy", "--count", "3", "--output", str(out), "--no-progress", timeout=300)
    assert proc.returncode == 0, proc.stderr
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == [0, 1, 2]
    captions = caption_set(dataset)
    for e in entries:  # the bytes accuracy_coco.py reshapes to (1024, 1024, 3): the reference image itself
        image = np.frombuffer(bytes.fromhex(e["data"]), np.uint8).reshape(1024, 1024, 3)
        assert np.array_equal(image, captions.reference_image(e["qsl_idx"]))
    found = figures(out / "accuracy.txt")
    assert abs(found["FID_SCORE"]) < 1e-2, found  # the statistics are those of the same three images
    assert found["CLIP_SCORE"] != 0
    assert json.loads((out / "mlharness_run.json").read_text())["benchmark"] == "stable-diffusion-xl"


def test_oracle_single_stream(run_cli, dataset, manifest, tmp_path):
    """SingleStream with image responses (performance mode: the accuracy path is the Offline test's)."""
    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", str(manifest), "--dataset-path", str(dataset), "--scenario",
                   "SingleStream", "--mode", "performance", "--count", "3", "--min-query-count", "16",
                   "--min-duration-ms", "200", "--no-calibrate", "--output", str(out), "--no-progress", timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert "Scenario : SingleStream" in summary and "Mode     : PerformanceOnly" in summary
    latency = re.search(r"90.0th percentile latency \(ns\) : (\d+)", summary)
    assert latency and int(latency.group(1)) > 0


def test_ten_image_log_truncates_within_the_rules(tmp_path):
    """A 10-image accuracy log (60 MiB of hex) keeps its two ends and its hash, under the checker's size
    limit."""
    log = tmp_path / "mlperf_log_accuracy.json"
    rng = np.random.default_rng(1)
    with open(log, "w") as f:
        f.write("[\n")
        for i in range(10):
            data = rng.integers(0, 256, 1024 * 1024 * 3, dtype=np.uint8).tobytes().hex().upper()
            f.write(("," if i else "") + json.dumps({"seq_id": i, "qsl_idx": i, "data": data}) + "\n")
        f.write("]\n")
    acc = tmp_path / "accuracy.txt"
    acc.write_text("Accuracy Results: {'FID_SCORE': '23.5', 'CLIP_SCORE': '31.75'}\n")
    digest = truncate_accuracy_log(log, acc, tmp_path / "archive" / "mlperf_log_accuracy.json")
    assert log.stat().st_size <= MAX_ACCURACY_LOG_SIZE
    assert f"hash={digest}" in acc.read_text().splitlines()
    assert log.read_text().startswith('[\n{"seq_id": 0, "qsl_idx": 0, "data": "')
    assert (tmp_path / "archive" / "mlperf_log_accuracy.json").stat().st_size > 60 * 2**20


def _scenario(scen_dir: Path, scenario: str, accuracy_line: str) -> None:
    write_run(scen_dir / "performance" / "run_1", scenario, 5.0)
    acc = scen_dir / "accuracy"
    write_run(acc, scenario, 5.0, effective_test_mode="AccuracyOnly", effective_accuracy_sample_count=5000)
    (acc / "mlperf_log_accuracy.json").write_text("[]")
    (acc / "accuracy.txt").write_text(f"{accuracy_line}\n\nhash=abc123\n")
    for name, text in (("user.conf", "*.Offline.target_qps = 1\n"), ("README.md", "x\n")):
        (scen_dir / name).write_text(text)


def _tree(root: Path, clip: float, fid: float) -> Path:
    sub = root / "closed" / "Acme"
    system = {k: "x" for k in SYSTEM_DESC_REQUIRED_FIELDS}
    system.update(division="closed", submitter="Acme", status="available", system_type="edge", system_name="box",
                  number_of_nodes=1)
    (sub / "systems").mkdir(parents=True)
    (sub / "systems" / "box.json").write_text(json.dumps(system))
    line = f"Accuracy Results: {{'FID_SCORE': '{fid}', 'CLIP_SCORE': '{clip}'}}"
    for scenario in ("SingleStream", "Offline"):
        _scenario(sub / "results" / "box" / "stable-diffusion-xl" / scenario, scenario, line)
    return root


@pytest.mark.parametrize(("clip", "fid", "message"), [
    (31.75, 23.5, None),
    (31.9, 23.5, "CLIP_SCORE 31.9 is above the upper limit 31.81331801 of its window"),
    (31.5, 23.5, "CLIP_SCORE 31.5 is below the lower bound 31.68631873 of its window"),
    (31.75, 24.1, "FID_SCORE 24.1 is above the upper limit 23.95007626 of its window"),
    (31.75, 22.9, "FID_SCORE 22.9 is below the lower bound 23.01085758 of its window"),
])
def test_check_applies_both_windows(tmp_path, clip, fid, message):
    report = check(_tree(tmp_path, clip, fid), round_name="v6.1")
    window = [str(f) for f in report.errors if "window" in str(f) or "_SCORE" in str(f)]
    if message is None:
        assert window == []
        assert any(r.accuracy == "CLIP_SCORE 31.75" for r in report.rows)
    else:
        assert len(window) == 2 and all(message in w for w in window), window  # both scenarios' accuracy.txt


def test_rules_of_the_benchmark():
    assert ACCURACY_WINDOWS["stable-diffusion-xl"] == {"CLIP_SCORE": (31.68631873, 31.81331801),
                                                      "FID_SCORE": (23.01085758, 23.95007626)}
    assert compliance_tests_for_model("stable-diffusion-xl") == ("TEST01", "TEST04")
    assert "stable-diffusion-xl" in ROUNDS["v6.1"].benchmarks
    from mlharness.submission.rules import rules_for

    rules = rules_for("v6.1")
    assert rules.benchmarks["stable-diffusion-xl"].dataset_size == 5000
    assert rules.required_scenarios["edge"]["stable-diffusion-xl"] == ("SingleStream", "Offline")
    # the checker has no datacenter-only entry for it: datacenter systems submit it as "datacenter,edge"
    assert "stable-diffusion-xl" not in rules.required_scenarios["datacenter"]
    assert set(rules.required_scenarios["datacenter,edge"]["stable-diffusion-xl"]) == {"SingleStream", "Offline",
                                                                                      "Server"}
    assert rules.server_latency_ns["stable-diffusion-xl"] == 20_000_000_000
