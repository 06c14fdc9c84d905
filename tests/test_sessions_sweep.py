"""``mlharness sweep --replay``: real LoadGen runs of a trace's sessions per point (Offline sessions in flight, Server
session rates) with each point's figures over sessions, the knee and highest VALID value, the report's table; the
Offline bound on sessions in flight, measured at the server and in sessions.jsonl; MultiStream refused."""

from __future__ import annotations

import json
import time

import pytest
from helpers.session_server import ChatServer

from mlharness.cli import main
from mlharness.kinds.sessions.records import read_records
from mlharness.kinds.sessions.synth import synthetic_agentic_trace

pytest.importorskip("mlperf_loadgen")


class CountingServer(ChatServer):
    """The chat server, keeping each request's (arrival, end, session) to count those in flight at once."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.spans: list[tuple[float, float, str]] = []

    async def _chat(self, request):
        t0 = time.perf_counter()
        try:
            return await super()._chat(request)
        finally:
            self.spans.append((t0, time.perf_counter(), request.headers.get("X-Session-ID", "")))


def peak(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])  # an end before a start at a tie
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_offline_sweep_bounds_sessions_in_flight_and_reports_each_point(tmp_path):
    trace = synthetic_agentic_trace(tmp_path / "trace.jsonl", sessions=8, turns=2)
    out = tmp_path / "sweep"
    with CountingServer(delay_s=0.01) as server:
        rc = main(["sweep", "--replay", str(trace), "--endpoint", server.url, "--model", "chat-model",
                   "--concurrency", "2,4", "--queries", "8", "--min-duration-ms", "50", "--think-scale", "0",
                   "--affinity-header", "X-Session-ID", "--slo-ttft-ms", "10000", "--output", str(out),
                   "--no-progress"])
        spans = list(server.spans)
    assert rc == 0
    state = json.loads((out / "sweep.json").read_text())
    assert state["kind"] == "mlharness-sweep" and state["axis"] == "session_concurrency"
    assert state["scenario"] == "Offline" and state["mode"] == "performance"
    peaks = {}
    for p in state["points"]:
        records = read_records(out / p["dir"] / "sessions.jsonl")
        assert len(records) == 8 and all(r.ok for r in records)  # --queries sessions in LoadGen's one query
        played = [(r.started, r.finished) for r in records]
        lo, hi = min(a for a, _ in played), max(b for _, b in played)
        # at the server: requests of distinct sessions open at once, within this point's test
        at_server = [(a, b) for a, b, _ in spans if lo <= a <= hi]
        assert len(at_server) == 16 and peak(at_server) <= p["value"]
        peaks[p["value"]] = peak(played)
        assert peaks[p["value"]] <= p["value"]
        # the figures of a point over sessions, each from the run's own records
        assert p["sessions"] == 8 and p["good_sessions"] == 8 and p["goodput_fraction"] == 1.0
        assert p["goodput"] == p["throughput"] == p["sessions_per_s"] > 0 and p["turns_per_s"] == pytest.approx(2 * p["throughput"])
        assert set(p["latency_ms"]) == {"p50", "p90", "p99"} and p["ttft_ms"]["p90"] > 0 and p["tpot_ms"]["p90"] >= 0
        assert p["valid"], p["invalid_reasons"]  # 8 sessions of >= 20 ms each fill the 50 ms LoadGen asked for
    assert peaks[2] == 2 and peaks[4] > 2  # the bound is reached, and a larger one lets more sessions overlap
    assert state["max_valid"] == 4 and [a["value"] for a in state["aggregates"]] == [2, 4]
    assert "knee" in state and state["slo"] == {"ttft_every_turn": 10.0}
    sessions = json.loads((out / "sweep_sessions.json").read_text())
    assert [p["concurrency"] for p in sessions["points"]] == [2, 4]
    html = tmp_path / "report.html"
    assert main(["report", str(out), "--html", str(html)]) == 0
    page = html.read_text()
    assert "concurrency (sessions in flight)" in page and "session p90 (ms)" in page and "TTFT p90 (ms)" in page
    assert "throughput (sessions/s)" in page and "highest VALID offered load: 4" in page


def test_server_sweep_and_replay_lists_share_one_point_loop(tmp_path):
    trace = synthetic_agentic_trace(tmp_path / "trace.jsonl", sessions=2, turns=2)
    with ChatServer() as server:
        rc = main(["sweep", "--replay", str(trace), "--endpoint", server.url, "--model", "chat-model",
                   "--session-rates", "20,40", "--min-query-count", "4", "--min-duration-ms", "50",
                   "--think-scale", "0", "--output", str(tmp_path / "sweep"), "--no-progress"])
        assert rc == 0
        rc = main(["replay", str(trace), "--endpoint", server.url, "--model", "chat-model", "--session-rate",
                   "20,40", "--think-scale", "0", "--output", str(tmp_path / "replay"), "--no-progress"])
        assert rc == 0
    state = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert state["axis"] == "session_rate" and state["scenario"] == "Server" and state["mode"] == "performance"
    for p in state["points"]:
        detail = (tmp_path / "sweep" / p["dir"] / "mlperf_log_detail.txt").read_text()
        assert f'"requested_server_target_qps", "value": {p["value"]:g},' in detail  # LoadGen's rate
        assert p["sessions"] >= 4 and p["goodput_fraction"] == 1.0
        # fewer sessions than early stopping needs for a p99: shown, never the knee or the highest VALID rate
        assert p["meaningful"] is False and p["min_queries"] == 700
    assert state["knee"] is None and state["max_valid"] is None
    # mlharness replay with a list: the same loop and files, in its own mode (accuracy: every session once)
    listed = json.loads((tmp_path / "replay" / "sweep.json").read_text())
    assert listed["axis"] == "session_rate" and listed["mode"] == "accuracy"
    assert [p["sessions"] for p in listed["points"]] == [2, 2]
    assert all(not p["valid"] and "accuracy mode" in p["invalid_reasons"][0] for p in listed["points"])
    assert (tmp_path / "replay" / "sweep_sessions.json").is_file()


def test_a_session_model_refuses_multistream_before_it_loads(tmp_path, capsys):
    trace = synthetic_agentic_trace(tmp_path / "trace.jsonl", sessions=1, turns=2)
    with ChatServer() as server:
        rc = main(["replay", str(trace), "--endpoint", server.url, "--model", "chat-model", "--scenario",
                   "MultiStream", "--output", str(tmp_path / "out"), "--no-progress"])
        assert server.requests == []  # no warm-up, no calibration: nothing reached the model
    err = capsys.readouterr().err
    assert rc == 2 and "--scenario MultiStream" in err and "session model" in err
    assert "run SingleStream" in err and "Server" in err and "Offline" in err
    assert not (tmp_path / "out").exists()


def test_sweep_replay_refuses_flags_that_choose_other_points(tmp_path, capsys):
    trace = synthetic_agentic_trace(tmp_path / "trace.jsonl", sessions=1, turns=1)
    rc = main(["sweep", "--replay", str(trace), "--endpoint", "http://127.0.0.1:9", "--qps", "5",
               "--output", str(tmp_path / "a")])
    assert rc == 2 and "--qps" in capsys.readouterr().err
    rc = main(["sweep", "--session-rates", "1,2", "--endpoint", "http://127.0.0.1:9", "--output", str(tmp_path / "b")])
    assert rc == 2 and "--replay TRACE" in capsys.readouterr().err
    rc = main(["sweep", "--replay", str(trace), "--endpoint", "http://127.0.0.1:9", "--output", str(tmp_path / "c")])
    assert rc == 2 and "--session-rates" in capsys.readouterr().err
    assert not any((tmp_path / n).exists() for n in "abc")
