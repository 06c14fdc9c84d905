"""Model-level trace: valid Chrome trace JSON, one predict span per batch, every sample id, spans that nest and
never overlap within a worker; and no trace file at all when tracing is off."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

pytestmark = pytest.mark.slow


def _run(run_cli, out, *extra):
    proc = run_cli("run", "--scenario", "Offline", "--mode", "accuracy", "--count", "100", "--max-batchsize", "8",
                   "--output", str(out), "--no-progress", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "mlharness_run.json").read_text())


@pytest.mark.parametrize("workers", ["1", "2"])
def test_model_trace(run_cli, tmp_path, workers):
    out = tmp_path / "traced"
    meta = _run(run_cli, out, "--trace", "model", "--workers", workers)
    doc = json.loads((out / "mlharness_trace.json").read_text())
    events = doc["traceEvents"]
    assert doc["otherData"]["trace_level"] == "model"
    spans = [e for e in events if e["ph"] == "X"]
    for e in spans:
        assert {"name", "ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0
    by_name = defaultdict(list)
    for e in spans:
        by_name[e["name"]].append(e)
    batches = meta["samples"]["batches"]
    assert len(by_name["predict"]) == batches == len(by_name["batch"])
    assert len(by_name["preprocess"]) == 100
    # every issued sample appears exactly once across the batch spans
    ids = [i for e in by_name["batch"] for i in e["args"]["sample_ids"]]
    assert len(ids) == len(set(ids)) == meta["samples"]["issued"] == 100
    assert sorted(i for e in by_name["batch"] for i in e["args"]["sample_indices"]) == list(range(100))
    # within one worker thread: batch spans do not overlap, and each stage lies inside its batch
    eps = 1e-3  # microseconds of float rounding
    per_tid = defaultdict(list)
    for e in by_name["batch"]:
        per_tid[e["tid"]].append(e)
    for tid, bs in per_tid.items():
        bs.sort(key=lambda e: e["ts"])
        for a, b in zip(bs, bs[1:], strict=False):
            assert a["ts"] + a["dur"] <= b["ts"] + eps
        for stage in ("gather", "predict", "postprocess", "complete"):
            for s in (e for e in by_name[stage] if e["tid"] == tid):
                assert any(b["ts"] - eps <= s["ts"] and s["ts"] + s["dur"] <= b["ts"] + b["dur"] + eps for b in bs)
    assert len(per_tid) <= int(workers)


def test_no_trace_file_when_off(run_cli, tmp_path):
    out = tmp_path / "plain"
    _run(run_cli, out)
    assert not (out / "mlharness_trace.json").exists()
    assert not (out / "mlperf_log_trace.json").exists()


def test_unknown_trace_level(run_cli, tmp_path):
    proc = run_cli("run", "--scenario", "Offline", "--mode", "accuracy", "--trace", "modle", "--output",
                   str(tmp_path / "x"), "--no-progress")
    assert proc.returncode == 2 and "Did you mean 'model'?" in proc.stderr


def test_tracing_off_builds_nothing_for_the_timed_path():
    """Level none: no tracer object (the SUT then takes its untraced path), no framework profiler, and the
    telemetry sampler records no counters; counters start at level system, profilers at framework."""
    from mlharness.telemetry.observe import RunObservers, wants_profile
    from mlharness.telemetry.trace import Tracer, make_tracer

    for off in (None, "", "none"):
        assert make_tracer(off) is None and not wants_profile(off)
        obs = RunObservers([], make_tracer(off), 500)
        assert obs.tracer is None and not obs.profiling and obs.sampler.tracer is None
    model = RunObservers([], Tracer("model"), 500)
    assert not model.profiling and model.sampler.tracer is None and not wants_profile("model")
    fw = RunObservers([], Tracer("framework"), 500)
    assert fw.profiling and fw.sampler.tracer is None and wants_profile("framework")
    system = RunObservers([], Tracer("system"), 500)
    assert system.profiling and system.sampler.tracer is system.tracer
