"""TEST08 on real runs: the official audit.config makes a dlrm-v3 performance run log a sample of its responses,
and `mlharness audit verify TEST08` matches them to the accuracy run's on (ts_idx, query_idx), writing
TEST08/verify_accuracy.txt as compliance/TEST08/run_verification.py prints it: the oracle passes, the random model
(whose NE differs from the oracle's accuracy run) fails with exit status 4."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from mlharness.paths import AUDIT_DIR

MANIFESTS = Path(__file__).parents[1] / "mlharness" / "manifests" / "dlrm-v3"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness", *args], capture_output=True, text=True, timeout=180,
                          cwd=cwd)


def _run(model: str, stream: Path, out: Path, *extra: str) -> None:
    r = _cli("run", "--manifest", str(MANIFESTS / f"{model}.yaml"), "--dataset-path", str(stream), "--scenario",
             "Offline", "--output", str(out), *extra, cwd=out.parent)
    assert r.returncode == 0, r.stdout + r.stderr


def test_test08_passes_on_the_oracle_and_fails_on_another_model(tmp_path):
    assert (AUDIT_DIR / "TEST08" / "dlrm-v3" / "audit.config").read_text().count("accuracy_log_sampling_target = 4096")
    stream = tmp_path / "stream"
    assert _cli("dataset", "synth", "dlrm-v3", "--out", str(stream), cwd=tmp_path).returncode == 0
    scen = tmp_path / "sys" / "dlrm-v3" / "Offline"
    scen.mkdir(parents=True)
    _run("dlrm-v3-oracle", stream, scen / "accuracy", "--mode", "accuracy")
    audit = ["--mode", "performance", "--min-duration-ms", "200", "--audit-config",
             str(AUDIT_DIR / "TEST08" / "dlrm-v3" / "audit.config")]
    verdicts = {}
    for model in ("dlrm-v3-oracle", "dlrm-v3-random"):
        shutil.rmtree(scen / "TEST08", ignore_errors=True)
        shutil.rmtree(scen / "performance", ignore_errors=True)
        _run(model, stream, scen / "performance", *audit)
        (scen / "TEST08" / "accuracy").mkdir(parents=True)
        shutil.copytree(scen / "performance", scen / "TEST08" / "performance" / "run_1")
        shutil.move(scen / "TEST08" / "performance" / "run_1" / "mlperf_log_accuracy.json",
                    scen / "TEST08" / "accuracy" / "mlperf_log_accuracy.json")
        r = _cli("audit", "verify", "TEST08", "--results", str(tmp_path), cwd=tmp_path)
        verdicts[model] = (r.returncode, r.stdout + r.stderr, (scen / "TEST08" / "verify_accuracy.txt").read_text())
    rc, out, text = verdicts["dlrm-v3-oracle"]
    assert rc == 0 and "TEST08 accuracy PASS" in out, out
    assert text.startswith("Verifying accuracy. This might take a while...\nReading accuracy mode results...\n")
    assert "num_unmatched = 0\nnum_ne_mismatch = 0\ntolerance = 0.10%\n\nTEST PASS\nTEST08 verification complete\n" in text
    rc, out, text = verdicts["dlrm-v3-random"]
    assert rc == 4 and "TEST08 accuracy FAIL" in out, out
    assert "num_unmatched = 0\n" in text and "NE mismatch at (" in text and "\nTEST FAIL\n" in text
