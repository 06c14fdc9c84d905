"""The compliance verdicts and the packaged accuracy files follow the official MLCommons scripts exactly:
TEST04 compares queries per second read from the summaries (its 20% tolerance then covers nearly every
SingleStream / MultiStream run), TEST01 compares the detail logs' results, TEST01 compares responses in the
response dtype, and packaging writes accuracy.txt and the truncated logs byte for byte as
truncate_accuracy_log.py does. No LoadGen run: the logs are written in LoadGen's formats."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from mlharness.rounds import DEFAULT_ROUND, ROUNDS
from mlharness.submission.audits import scenario_verdicts
from mlharness.submission.compliance import verify_performance, verify_test01_accuracy
from mlharness.submission.layout import Tree
from mlharness.submission.package import package
from tests.helpers.loadgen_logs import write_run

SEEDS = {f"effective_{k}": v for k, v in ROUNDS[DEFAULT_ROUND].seeds.items()}


def verdict(tmp_path: Path, test: str, scenario: str, ref: float, score: float):
    return verify_performance(write_run(tmp_path / "ref", scenario, ref), write_run(tmp_path / "test", scenario, score),
                              test)


# ------------------------------------------------------------------------------------------------- TEST04
def test_test04_singlestream_run_11_7_percent_faster_passes(tmp_path):
    ref_ns = 10_000_000
    test_ns = round(ref_ns / 1.117)  # 11.7% more queries per second than the reference
    result = verdict(tmp_path, "TEST04", "SingleStream", ref_ns, test_ns)
    assert result.passed, result.text
    assert result.text.splitlines()[-1] == "TEST PASS"
    # the official script prints the scores it compared: queries per second from the summaries' estimates
    assert f"reference score = {1e9 / ref_ns}" in result.text and f"test score = {1e9 / test_ns}" in result.text


@pytest.mark.parametrize(("scenario", "ref_ns", "test_ns", "passed"), [
    # SingleStream: 20% as long as the reference rate is at most 200,000 queries/s (latency >= 5,000 ns)
    ("SingleStream", 10_000_000, 8_333_334, True),  # 119.99999 q/s < 120
    ("SingleStream", 10_000_000, 8_333_333, False),  # 120.000005 q/s: 20% faster
    ("SingleStream", 5_000, 4_167, True),  # reference exactly 200,000 q/s: still 20%
    ("SingleStream", 5_000, 4_166, False),
    ("SingleStream", 4_000, 3_650, True),  # 250,000 q/s: 10%; 9.6% faster
    ("SingleStream", 4_000, 3_630, False),  # 10.2% faster
    # MultiStream: 20% up to 1,600,000 queries/s (latency >= 625 ns)
    ("MultiStream", 50_000_000, 41_666_667, True),
    ("MultiStream", 50_000_000, 41_666_666, False),
    ("MultiStream", 625, 530, True),  # exactly 1.6 M q/s: 20%; 17.9% faster
    ("MultiStream", 600, 530, False),  # 1.67 M q/s: 10%; 13.2% faster
    ("SingleStream", 10_000_000, 30_000_000, True),  # slower is no cheating
])  # fmt: skip
def test_test04_latency_boundaries_follow_the_official_rule(tmp_path, scenario, ref_ns, test_ns, passed):
    result = verdict(tmp_path, "TEST04", scenario, ref_ns, test_ns)
    assert result.passed is passed, result.text
    assert result.text.splitlines()[-1] == ("TEST PASS" if passed else "TEST FAIL: Test score invalid")


@pytest.mark.parametrize(("scenario", "ref", "score", "passed"), [
    ("Offline", 1000.0, 1099.9, True), ("Offline", 1000.0, 1100.1, False), ("Offline", 1000.0, 10.0, True),
    ("Server", 500.0, 549.9, True), ("Server", 500.0, 550.1, False),
])  # fmt: skip
def test_test04_throughput_scenarios_have_10_percent(tmp_path, scenario, ref, score, passed):
    result = verdict(tmp_path, "TEST04", scenario, ref, score)
    assert result.passed is passed, result.text


def test_test04_reads_the_summaries_and_refuses_invalid_or_mismatched_runs(tmp_path):
    ref = write_run(tmp_path / "ref", "SingleStream", 1_000_000)
    test = write_run(tmp_path / "test", "SingleStream", 1_000_000)
    # the verdict comes from the summaries: a detail log saying otherwise does not change it
    test.write_text(test.read_text().replace("1000000", "10"))
    assert verify_performance(ref, test, "TEST04").passed
    invalid = verify_performance(ref, write_run(tmp_path / "bad", "SingleStream", 1_000_000, valid=False), "TEST04")
    assert not invalid.passed and invalid.text.splitlines()[-1] == "TEST FAIL: Test results are invalid"
    other = verify_performance(ref, write_run(tmp_path / "off", "Offline", 1000.0), "TEST04")
    assert not other.passed and other.text.splitlines()[-1] == "Test and reference scenarios do not match!"


# ------------------------------------------------------------------------------------------------- TEST01
@pytest.mark.parametrize(("scenario", "ref", "score", "passed"), [
    # the detail logs' results as they are: latencies in ns; 20% only for references of at most 200,000 ns
    ("SingleStream", 200_000, 239_999, True), ("SingleStream", 200_000, 240_001, False),
    ("SingleStream", 200_000, 160_001, True), ("SingleStream", 200_000, 159_999, False),
    ("SingleStream", 200_001, 219_000, True), ("SingleStream", 200_001, 221_000, False),
    ("SingleStream", 10_000_000, 11_170_000, False),  # 11.7% slower: outside 10%
    ("MultiStream", 1_600_000, 1_900_000, True), ("MultiStream", 1_600_001, 1_900_000, False),
    ("Offline", 1000.0, 1099.0, True), ("Offline", 1000.0, 1101.0, False), ("Offline", 1000.0, 899.0, False),
])  # fmt: skip
def test_test01_performance_boundaries_follow_the_official_rule(tmp_path, scenario, ref, score, passed):
    result = verdict(tmp_path, "TEST01", scenario, ref, score)
    assert result.passed is passed, result.text
    assert f"Reference score = {float(ref)}" in result.text and f"Test score = {float(score)}" in result.text
    assert result.text.splitlines()[-1] == ("TEST PASS" if passed else "TEST FAIL: Test score invalid")


def test_test01_performance_fails_where_the_official_script_stops(tmp_path):
    ref = write_run(tmp_path / "ref", "Offline", 1000.0)
    errors = write_run(tmp_path / "err", "Offline", 1000.0)
    errors.write_text(errors.read_text() + ":::MLLOG " + json.dumps(
        {"key": "error_runtime", "value": "x", "metadata": {"is_error": True, "is_warning": False}}) + "\n")
    result = verify_performance(ref, errors, "TEST01")
    assert not result.passed and "1 ERROR reported in" in result.text.splitlines()[-1]
    server = verify_performance(write_run(tmp_path / "s1", "Server", 10.0, effective_target_latency_ns=15),
                                write_run(tmp_path / "s2", "Server", 10.0, effective_target_latency_ns=20), "TEST01")
    assert not server.passed and server.text.splitlines()[-1] == "TEST FAIL: Server target latency mismatch"


# ---------------------------------------------------------------------------------------- TEST01 dtype
def _float_log(path: Path, labels: dict[int, float]) -> Path:
    path.write_text(json.dumps([{"seq_id": i, "qsl_idx": q, "data": struct.pack("<f", v).hex().upper()}
                                for i, (q, v) in enumerate(labels.items())]))
    return path


def test_test01_compares_float32_labels_in_float32(tmp_path):
    labels = {i: float(i % 10) for i in range(20)}
    ref = _float_log(tmp_path / "acc.json", labels)
    same = _float_log(tmp_path / "same.json", {3: 3.0, 5: 5.0})
    wrong = _float_log(tmp_path / "wrong.json", {3: 3.0, 5: 6.0})  # 5.0 and 6.0 share their first byte (0)
    assert verify_test01_accuracy(ref, wrong, "byte").passed  # why the byte default is not enough
    result = verify_test01_accuracy(ref, wrong, "float32", "response element type float32")
    assert not result.passed and "num_perf_log_data_mismatch = 1" in result.text
    assert result.text.splitlines()[-2] == "TEST FAIL"
    ok = verify_test01_accuracy(ref, same, "float32", "response element type float32")
    assert ok.passed and ok.text.endswith("num_missing_qsl_idxs = 0\nTEST PASS\n\n")
    assert ok.text.splitlines()[1].startswith("dtype = float32 (response element type float32")


def test_scenario_verification_uses_the_recorded_response_dtype(tmp_path):
    tree = Tree(tmp_path / "results")
    ids = ("box", "resnet", "Offline")
    scen = tree.scenario_dir(*ids)
    labels = {i: float(i % 10) for i in range(20)}
    (scen / "accuracy").mkdir(parents=True)
    _float_log(scen / "accuracy" / "mlperf_log_accuracy.json", labels)
    write_run(scen / "performance" / "run_1", "Offline", 1000.0)
    write_run(scen / "TEST01" / "performance" / "run_1", "Offline", 1000.0)
    (scen / "TEST01" / "accuracy").mkdir()
    _float_log(scen / "TEST01" / "accuracy" / "mlperf_log_accuracy.json", {3: 3.0, 5: 6.0})
    record = tree.record_dir(*ids, "accuracy")
    record.mkdir(parents=True)
    (record / "mlharness_run.json").write_text(json.dumps({"response_element_type": "float32"}))
    accuracy, performance = scenario_verdicts(tree, ids, ["TEST01"])
    assert not accuracy.passed and performance.passed
    text = (scen / "TEST01" / "verify_accuracy.txt").read_text()
    assert "dtype = float32 (response element type float32, from the accuracy run" in text
    assert "run_verification.py needs --dtype float32" in text and "TEST FAIL" in text.splitlines()
    _float_log(scen / "TEST01" / "accuracy" / "mlperf_log_accuracy.json", {3: 3.0, 5: 5.0})
    assert all(v.passed for v in scenario_verdicts(tree, ids, ["TEST01"]))


# ------------------------------------------------------------------------------------------ truncation
def official_truncation(log: bytes, accuracy_txt: str) -> tuple[bytes, bytes]:
    """truncate_accuracy_log.py's rule, written independently: sha256 of the full log after a blank line,
    and the first and last 4096 bytes of a log of at least 4096 bytes around "\\n\\n...\\n\\n"."""
    digest = hashlib.sha256(log).hexdigest()
    kept = log if len(log) < 4096 else log[:4096] + b"\n\n...\n\n" + log[len(log) - 4096:]
    return kept, (accuracy_txt + "\n" + "hash=" + digest + "\n").encode()


def _accuracy_log(size: int) -> bytes:
    entries, out = [], b"[]"
    while len(out) < size:
        entries.append({"seq_id": len(entries), "qsl_idx": len(entries), "data": "0000A040"})
        out = ("[\n" + ",\n".join(json.dumps(e) for e in entries) + "\n]\n").encode()
    return out


def test_packaging_truncates_byte_for_byte_as_the_official_script(tmp_path):
    tree = Tree(tmp_path / "results")
    tree.write_state({"division": "open", "submitter": "Acme", "benchmarks": {},
                      "systems": {"box": {"fields": {"system_name": "box"}, "sources": {}}}})
    logs = {"Offline": _accuracy_log(3000), "SingleStream": _accuracy_log(6000), "MultiStream": _accuracy_log(60000)}
    assert len(logs["Offline"]) < 4096 <= len(logs["SingleStream"]) <= 8192 < len(logs["MultiStream"])
    text = "accuracy=100.000%, good=256, total=256\n"
    for scenario, log in logs.items():
        acc = tree.scenario_dir("box", "demo", scenario) / "accuracy"
        # complete runs (package refuses an incomplete tree), with the default round's seeds
        write_run(acc, scenario, 1.0, effective_test_mode="AccuracyOnly")
        write_run(acc.parent / "performance" / "run_1", scenario, 1.0, **SEEDS)
        (acc / "mlperf_log_accuracy.json").write_bytes(log)
        (acc / "accuracy.txt").write_text(text)
        t01 = acc.parent / "TEST01" / "accuracy"
        t01.mkdir(parents=True)
        (t01 / "mlperf_log_accuracy.json").write_bytes(log)
    fallback = tree.scenario_dir("box", "demo", "MultiStream") / "TEST01" / "accuracy" / "accuracy.txt"
    fallback.write_text("accuracy=99.000%, good=99, total=100\n")  # a non-deterministic fallback's score
    report = package(tree.root, tmp_path / "pkg")
    results = report.submitter_dir / "results" / "box" / "demo"
    for scenario, log in logs.items():
        kept, accuracy_txt = official_truncation(log, text)
        acc = results / scenario / "accuracy"
        assert (acc / "accuracy.txt").read_bytes() == accuracy_txt, scenario
        assert (acc / "mlperf_log_accuracy.json").read_bytes() == kept, scenario
        archived = report.archive / acc.relative_to(tmp_path / "pkg") / "mlperf_log_accuracy.json"
        assert archived.read_bytes() == log
        if scenario != "MultiStream":  # no accuracy.txt in TEST01/accuracy: the official script keeps the log
            assert (results / scenario / "TEST01" / "accuracy" / "mlperf_log_accuracy.json").read_bytes() == log
    t01 = results / "MultiStream" / "TEST01" / "accuracy"
    kept, accuracy_txt = official_truncation(logs["MultiStream"], "accuracy=99.000%, good=99, total=100\n")
    assert (t01 / "mlperf_log_accuracy.json").read_bytes() == kept
    assert (t01 / "accuracy.txt").read_bytes() == accuracy_txt
    # a log of 4096 to 8192 bytes is "truncated" too, and grows (both ends overlap)
    grown = results / "SingleStream" / "accuracy" / "mlperf_log_accuracy.json"
    assert grown.stat().st_size == 2 * 4096 + 7 > len(logs["SingleStream"])
