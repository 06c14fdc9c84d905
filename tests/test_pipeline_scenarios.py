"""The pipeline SUT beyond Offline: pipeline-toy VALID in SingleStream and Server with only --min-duration-ms, and
a SIGINT during a run that drains it (every LoadGen sample completed exactly once, exit 130, no hang)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mlharness.paths import MANIFESTS_DIR

pytest.importorskip("mlperf_loadgen")

TOY = MANIFESTS_DIR / "pipeline-toy" / "pipeline-toy.yaml"


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "MLHARNESS_CACHE": str(tmp / "cache")}


def _args(tmp: Path, manifest: Path, scenario: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "mlharness", "run", "--manifest", str(manifest), "--scenario", scenario,
            "--output", str(tmp / "out"), "--no-progress", *args]


@pytest.mark.parametrize("scenario", ["SingleStream", "Server"])
def test_toy_pipeline_is_valid_with_only_min_duration(tmp_path, scenario):
    p = subprocess.run(_args(tmp_path, TOY, scenario, "--mode", "performance", "--min-duration-ms", "500"),
                       capture_output=True, text=True, timeout=120, env=_env(tmp_path), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "VALID" in p.stdout and "INVALID" not in p.stdout, p.stdout
    summary = json.loads((tmp_path / "out" / "pipeline_summary.json").read_text())
    records = [json.loads(x) for x in (tmp_path / "out" / "pipeline_results.jsonl").read_text().splitlines()]
    assert summary["failed"] == 0 and summary["samples"] == len(records) > 10
    assert all(s["count"] == len(records) and s["errors"] == 0 for s in summary["stages"])
    assert all(r["result"]["trail"] == ["retrieve", "rerank", "generate"] for r in records)
    if scenario == "SingleStream":  # one sample at a time: no two samples' visits overlap
        spans = sorted((r["stages"][0]["queued_s"], r["stages"][-1]["leave_s"]) for r in records)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_sigint_drains_the_pipeline_every_sample_completed_once(tmp_path):
    """An accuracy run of 200 samples through a 100 ms stage (two workers: about 10 s, so a loaded host that is
    slow to deliver the signal still has most samples left); SIGINT once samples are flowing inside the LoadGen
    test: the run ends with 130 well before the work left would (no hang), and LoadGen's accuracy log holds every sample
    exactly once, those after the signal empty, and the run's records carry a result for the answered samples only."""
    doc = yaml.safe_load(TOY.read_text())
    marker = tmp_path / "flowing"
    doc["inputs"][0]["parameters"]["stages"] = [
        {"name": "a", "framework": "toy-stage", "options": {"delay_ms": 1}},
        {"name": "slow", "framework": "toy-stage", "options": {"delay_ms": 100}, "workers": 2,
         "after": f"def after(ctx, item):\n    with open({str(marker)!r}, 'a') as f:\n        f.write('.')\n"
                  "    item['result'] = {'trail': item['trail']}\n    return item\n"}]  # the last stage's result
    doc["dataset"]["init"] = doc["dataset"]["init"].replace("range(64)", "range(200)")
    doc["postprocess"] = "def postprocess(ctx, item):\n    item['response'] = [len(item['trail'])]\n    return item\n"
    manifest = tmp_path / "pipe.yaml"
    manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
    err = tmp_path / "stderr.txt"
    with open(err, "w") as f:
        proc = subprocess.Popen(_args(tmp_path, manifest, "Offline", "--mode", "accuracy"), stdout=subprocess.DEVNULL,
                                stderr=f, cwd=tmp_path, env=_env(tmp_path))
        deadline = time.monotonic() + 60
        while "LoadGen will issue" not in err.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        marker.unlink(missing_ok=True)
        while not marker.exists() or len(marker.read_text()) < 20:  # past the warm-up plays: samples answered
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.02)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the pipeline run did not end after SIGINT")
    stderr = err.read_text()
    assert rc == 130, stderr
    assert time.monotonic() - sent < 20  # drained, not waited for: the stage's work left is about 9 s
    assert "interrupted by SIGINT" in stderr and "Traceback" not in stderr, stderr
    (failed,) = list(tmp_path.glob("out.failed-*"))
    entries = json.loads((failed / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(200))  # every sample completed exactly once
    answered = [e for e in entries if e["data"]]
    assert 0 < len(answered) < 200  # those before the signal answered, the rest drained empty
    assert all(int.from_bytes(bytes.fromhex(e["data"]), "little") == 2 for e in answered)
    # a result only where LoadGen got the response: a sample drained after its stages finished has none to score
    records = [json.loads(x) for x in (failed / "pipeline_results.jsonl").read_text().splitlines()]
    assert {r["qsl_idx"] for r in records if r["result"] is not None} == {e["qsl_idx"] for e in answered}
    assert all(r["drained"] and r["result"] is None for r in records if r["qsl_idx"] not in
               {e["qsl_idx"] for e in answered}), records
