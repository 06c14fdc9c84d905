"""INVALID explained, on real LoadGen 6.0.17 summaries and detail-log events (tests/data/loadgen_invalid)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlharness.calibration.explain import explain, explain_run, summary_sections
from mlharness.loadgen.logs import read_detail

DATA = Path(__file__).parent / "data" / "loadgen_invalid"


def case(name: str, scenario: str, model: str = "toy", detail: str | None = None):
    events = read_detail(DATA / detail) if detail else []
    return explain((DATA / f"{name}.summary.txt").read_text(), events, scenario, model)


def test_singlestream_that_ran_out_of_queries():
    e = case("singlestream_ran_out", "SingleStream", detail="singlestream_ran_out.detail.txt")
    assert not e.valid and e.failed == ["min duration"]
    assert e.recommendations == ["Decrease the expected latency so the loadgen pre-generates more queries."]
    # the fix: half the run's mean latency (30502 ns), as a flag and as a user.conf line
    assert [f.flag for f in e.fixes] == ["--target-latency-ms 0.01525"]
    assert e.fixes[0].conf_line == "toy.SingleStream.target_latency = 0.01525"
    assert e.errors == ["Ending early: Ran out of generated queries to issue before the minimum query count and test "
                        "duration were reached. Please update the relevant expected latency or target qps in the "
                        "TestSettings so they are more accurate."]
    text = "\n".join(e.lines())
    assert "INVALID because: min duration not met" in text and "error_runtime" not in text
    assert "fix: --target-latency-ms 0.01525   (or in the user.conf: toy.SingleStream.target_latency = 0.01525)" in text


def test_multistream_fix_uses_the_per_query_latency():
    e = case("multistream_ran_out", "MultiStream", model="m")
    assert e.failed == ["min duration"]
    assert [f.conf_line for f in e.fixes] == ["m.MultiStream.target_latency = 0.01261"]  # 0.5 x 25230 ns, 4 digits


def test_offline_query_too_small():
    e = case("offline_short_query", "Offline")
    assert e.failed == ["min duration"]
    assert e.recommendations == ["Increase expected QPS so the loadgen pre-generates a larger (coalesced) query."]
    # 110 samples at 83,810/s lasted 1.3 ms of a 1 s minimum: the short query's rate understates, so 3 x 1.75 x it
    assert [f.flag for f in e.fixes] == ["--target-qps 440003.03"]


def test_server_over_its_latency_bound_lowers_the_rate_not_more_queries():
    e = case("server_over_latency", "Server", model="slowtoy")
    assert e.failed == ["latency bound", "early stopping"]
    assert e.recommendations == ["Reduce target QPS to improve latency."]
    # half of 269.856; the flag turns calibration (and its raised min_query_count) off, so the queries early
    # stopping needs come with it: 134.9 QPS x 1 s alone would be too few
    assert len(e.fixes) == 1 and e.fixes[0].flag == "--target-qps 134.9 --min-query-count 700"
    assert "mlharness tune --scenario Server" in e.fixes[0].conf_line


def test_server_with_too_few_queries_for_early_stopping():
    e = case("server_early_stopping", "Server")
    assert e.failed == ["early stopping"]
    # 100 processed + at least 359 more, with 25% to spare
    assert [f.flag for f in e.fixes] == ["--min-query-count 573"]
    sec = summary_sections((DATA / "server_early_stopping.summary.txt").read_text())
    assert sec["early_stopping"][-1] == ("Would need to run at least 359 more queries, with the run being successful "
                                         "if every additional query were under latency.")


def test_valid_runs_print_nothing_and_keep_warnings_as_text(tmp_path):
    summary = (DATA / "multistream_ran_out.summary.txt").read_text().replace("Result is : INVALID",
                                                                              "Result is : VALID")
    e = explain(summary, read_detail(DATA / "multistream_valid_warnings.detail.txt"), "MultiStream", "m")
    assert e.valid and e.fixes == [] and e.lines() == []
    assert "CAS failed." in e.warnings  # messages, not key names
    assert not any(w.startswith("warning_") for w in e.warnings)


@pytest.mark.parametrize("missing", ["mlperf_log_summary.txt", "mlperf_log_detail.txt"])
def test_explain_run_tolerates_missing_logs(tmp_path, missing):
    (tmp_path / "mlperf_log_summary.txt").write_text((DATA / "offline_short_query.summary.txt").read_text())
    (tmp_path / "mlperf_log_detail.txt").write_text((DATA / "singlestream_ran_out.detail.txt").read_text())
    (tmp_path / missing).unlink()
    e = explain_run(tmp_path, "Offline", "toy")
    assert e.valid is False  # no summary is no VALID verdict
    if missing == "mlperf_log_detail.txt":
        assert e.errors == [] and e.failed == ["min duration"]
    else:
        assert e.failed == [] and e.errors[0].startswith("Ending early: Ran out of generated queries")


def test_ttft_and_tpot_failures_are_named():
    # the Server summary above with the recommendation LoadGen's results.cc writes for token latencies
    text = (DATA / "server_over_latency.summary.txt").read_text().replace(
        " * Reduce target QPS to improve latency.",
        " * TTFT constrain not met: Reduce target QPS to improve latency.\n"
        " * TPOT constrain not met: Reduce target QPS to improve latency.")
    e = explain(text, [], "Server", "llm")
    assert e.failed == ["early stopping", "TTFT", "TPOT"]
    assert [f.flag for f in e.fixes] == ["--target-qps 134.9"]
