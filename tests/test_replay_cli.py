"""``mlharness replay``: a trace's sessions through the real CLI and LoadGen against a local chat server, a sweep
over session rates, a malformed trace refused, and the report's per-turn curves of the runs."""

from __future__ import annotations

import json

import pytest
from helpers.session_server import ChatServer

from mlharness.cli import main
from mlharness.sessions.records import read_records
from mlharness.sessions.synth import synthetic_agentic_trace

pytest.importorskip("mlperf_loadgen")


def test_replay_plays_every_session_of_the_trace_and_the_report_draws_its_turns(tmp_path):
    trace = synthetic_agentic_trace(tmp_path / "trace.jsonl", sessions=3, turns=3)
    with ChatServer() as server:
        rc = main(["replay", str(trace), "--endpoint", server.url, "--model", "chat-model", "--think-scale", "0.05",
                   "--affinity-header", "X-Session-ID", "--slo-ttft-ms", "10000", "--output", str(tmp_path / "out"),
                   "--no-progress"])
        bodies = [r["body"] for r in server.requests]
        headers = [r["headers"].get("X-Session-ID") for r in server.requests]
    assert rc == 0
    records = read_records(tmp_path / "out" / "sessions.jsonl")
    assert sorted(r.session for r in records) == ["synth-0-000", "synth-0-001", "synth-0-002"]
    assert all(r.ok and len(r.turns) == 3 for r in records)
    # the warm-up play (framework warmup 1) and the three sessions: every turn sent, with the trace's tools
    assert len(bodies) == 12 and all(b["model"] == "chat-model" and b["tools"] for b in bodies)
    assert set(headers) == {r.session for r in records}
    summary = json.loads((tmp_path / "out" / "sessions_summary.json").read_text())
    assert summary["slo"] == {"slo_ttft_ms": 10000.0} and summary["goodput"]["good_sessions"] == 3
    html = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "out"), "--html", str(html)]) == 0
    page = html.read_text()
    assert "<h2>Sessions</h2>" in page and "per-turn latencies" in page and "TTFT p50" in page


def test_a_sweep_over_session_rates_runs_one_server_replay_per_rate(tmp_path):
    trace = synthetic_agentic_trace(tmp_path / "trace.jsonl", sessions=2, turns=2)
    with ChatServer() as server:
        rc = main(["replay", str(trace), "--endpoint", server.url, "--model", "chat-model", "--think-scale", "0",
                   "--session-rate", "20,40", "--output", str(tmp_path / "sweep"), "--no-progress"])
    assert rc == 0
    sweep = json.loads((tmp_path / "sweep" / "sweep_sessions.json").read_text())
    assert sweep["scenario"] == "Server" and [p["session_rate"] for p in sweep["points"]] == [20.0, 40.0]
    for p in sweep["points"]:
        assert p["summary"]["sessions_ok"] == 2 and p["summary"]["goodput"]["fraction"] == 1.0
        detail = (tmp_path / "sweep" / p["label"] / "mlperf_log_detail.txt").read_text()
        assert f'"requested_server_target_qps", "value": {p["session_rate"]:g},' in detail  # LoadGen's rate


def test_a_malformed_trace_exits_2_naming_its_line(tmp_path, capsys):
    trace = synthetic_agentic_trace(tmp_path / "trace.jsonl", sessions=1, turns=2)
    lines = trace.read_text().splitlines()
    lines.insert(1, "{not json")
    trace.write_text("\n".join(lines) + "\n")
    rc = main(["replay", str(trace), "--endpoint", "http://127.0.0.1:9", "--model", "m", "--no-progress",
               "--output", str(tmp_path / "out")])
    assert rc == 2
    assert "trace.jsonl:2: invalid JSON" in capsys.readouterr().err  # the trace reader's message: file and line
    assert not (tmp_path / "out").exists()
