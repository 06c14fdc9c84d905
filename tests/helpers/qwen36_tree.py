"""A qwen3.6-27b results tree as ``mlharness submission run`` leaves it, from real LoadGen runs made here: a
SingleStream performance run whose samples are small sessions of two turns (timed, each turn recorded as the
session player records it, written to ``sessions.jsonl``), and an accuracy run over the 995 BFCL v4 samples whose
responses are scored into accuracy.txt's ``mAP=`` line. The model is a stand-in (sleeps, then answers): what is
tested is the writer and the checkers, on logs LoadGen wrote.

Run as a script, it writes the committed fixture (tests/fixtures/qwen36_submission/: the package and the official
checker's output on it) when MLHARNESS_INFERENCE_REPO names a checkout of mlcommons/inference."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from mlharness.kinds.sessions.records import SessionRecord, TurnRecord, write_records
from mlharness.rounds import get_round
from mlharness.submission.rules import SYSTEM_DESC_REQUIRED_FIELDS

SYSTEM, BENCH, SCEN = "edgebox", "qwen3.6-27b", "SingleStream"
DATASET = 995


def loadgen_run(outdir: Path, mode: str, total: int, min_duration_ms: int = 200, min_query_count: int = 8,
                correct: int = DATASET) -> None:
    """One LoadGen SingleStream test (``mode`` performance or accuracy) over ``total`` samples; in accuracy mode
    the first ``correct`` samples answer right, and accuracy.txt holds their share as ``mAP=``."""
    import mlperf_loadgen as lg

    outdir.mkdir(parents=True, exist_ok=True)
    records: list[SessionRecord] = []
    keep: list[np.ndarray] = []
    right: list[bool] = []

    def issue(samples):
        for s in samples:
            started, unix = time.perf_counter(), time.time()
            turns = []
            for k in range(2 if mode == "performance" else 1):
                sent = time.perf_counter()
                time.sleep(0.001 if mode == "performance" else 0)
                first = time.perf_counter()
                time.sleep(0.002 if mode == "performance" else 0)
                turns.append(TurnRecord(session=f"s{s.index}", turn=k, sent=sent, first=first, done=time.perf_counter(),
                                        think_s=0.0, waited_s=0.0, prompt_tokens=100 + 50 * k, completion_tokens=8,
                                        tool_calls=1))
            records.append(SessionRecord(f"s{s.index}", s.index, started, time.perf_counter(), unix, turns))
            right.append(s.index < correct)
            body = json.dumps({"session": f"s{s.index}", "answers": [{"content": "", "tool_calls": []}]}).encode()
            data = np.frombuffer(body, dtype=np.uint8).copy()
            keep.append(data)
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, data.ctypes.data, data.nbytes)])

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(total, total, lambda _: None, lambda _: None)
    settings = lg.TestSettings()
    settings.FromConfig("", BENCH, SCEN, 0)  # no qwen3.6-27b keys in mlperf.conf: its '*' lines
    settings.scenario = lg.TestScenario.SingleStream
    settings.mode = lg.TestMode.AccuracyOnly if mode == "accuracy" else lg.TestMode.PerformanceOnly
    settings.min_duration_ms = min_duration_ms
    settings.min_query_count = min_query_count
    settings.single_stream_expected_latency_ns = 5_000_000
    for key, value in get_round("v6.1").seeds.items():
        setattr(settings, key, value)
    log = lg.LogSettings()
    log.log_output.outdir = str(outdir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    lg.StartTestWithLogSettings(sut, qsl, settings, log)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    if mode == "performance":
        write_records(outdir / "sessions.jsonl", records)
    else:
        (outdir / "accuracy.txt").write_text(f"mAP={100.0 * sum(right) / len(right):.4f}\n")


def results_tree(root: Path, division: str = "closed", correct: int = DATASET, drop_sample: bool = False) -> Path:
    """``root``/results as ``submission run`` leaves it for qwen3.6-27b SingleStream; ``correct`` samples of 995
    answer right, ``drop_sample`` removes one sample from the accuracy log (a perturbed log)."""
    results = root / "results"
    scen = results / SYSTEM / BENCH / SCEN
    record = results / ".mlharness" / "runs" / SYSTEM / BENCH / SCEN / "performance"
    loadgen_run(scen / "performance" / "run_1", "performance", 4)
    loadgen_run(scen / "accuracy", "accuracy", DATASET, correct=correct)
    record.mkdir(parents=True)
    (scen / "performance" / "run_1" / "sessions.jsonl").rename(record / "sessions.jsonl")
    (scen / "performance" / "run_1" / "mlperf_log_accuracy.json").unlink()  # submission run keeps none there
    if drop_sample:
        log = scen / "accuracy" / "mlperf_log_accuracy.json"
        log.write_text(json.dumps(json.loads(log.read_text())[1:]))
    (scen / "measurements.json").write_text(json.dumps({
        "input_data_types": "int32 (token ids)", "retraining": "no", "starting_weights_filename": "stand-in",
        "weight_data_types": "none", "weight_transformations": "none"}))
    (scen / "user.conf").write_text("qwen3.6-27b.SingleStream.min_duration = 200\n")
    (scen / "README.md").write_text("# qwen3.6-27b SingleStream\n\nA stand-in model under real LoadGen runs.\n")
    fields = {k: "n/a" for k in SYSTEM_DESC_REQUIRED_FIELDS}
    fields.update(division=division, submitter="Acme", status="available", system_type="edge", system_name=SYSTEM,
                  number_of_nodes="1", host_processors_per_node="1", accelerators_per_node="0")
    state = {"division": division, "submitter": "Acme", "round": "v6.1",
             "systems": {SYSTEM: {"fields": fields, "sources": {k: "test" for k in fields}, "overrides": {}}},
             "benchmarks": {f"{SYSTEM}/{BENCH}": {"mlperf_model": BENCH, "model": "qwen3.6-27b-standin",
                                                  "scenarios": [SCEN]}}}
    (results / ".mlharness" / "submission.json").write_text(json.dumps(state, indent=2))
    src = results / ".mlharness" / "src" / SYSTEM / BENCH
    src.mkdir(parents=True)
    (src / "manifest.yaml").write_text("name: qwen3.6-27b-standin\n")
    return results


if __name__ == "__main__":  # the committed fixture
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from mlharness.submission.package import package

    tool = Path(os.environ["MLHARNESS_INFERENCE_REPO"]) / "tools" / "submission"
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "qwen36_submission"
    shutil.rmtree(fixture, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in (("passing", {}), ("short_accuracy_log", {"drop_sample": True}),
                             ("below_target", {"correct": 800})):
            results = results_tree(Path(tmp) / name, **kwargs)
            package(results, fixture / name / "package", archive=Path(tmp) / name / "archive")
            proc = subprocess.run([sys.executable, "-m", "submission_checker.main", "--input",
                                   str(fixture / name / "package"), "--version", "v6.1", "--csv",
                                   str(Path(tmp) / "summary.csv")], capture_output=True, text=True, timeout=120,
                                  cwd=tool)
            out = (proc.stdout + proc.stderr).replace(str(fixture / name / "package"), "<package>")
            (fixture / name / "official_checker_output.txt").write_text(out)
