"""``mlharness replay``: a trace's sessions through the real CLI and LoadGen against a local chat server, a sweep
over session rates, a malformed trace refused, the report's per-turn curves of the runs, and the ShareGPT and
Mooncake fixture traces replayed whole (every turn with its history; Mooncake's shared hash-id blocks reach the
server as shared prompt prefixes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.session_server import ChatServer

from mlharness.cli import main
from mlharness.kinds.sessions.records import read_records
from mlharness.kinds.sessions.synth import synthetic_agentic_trace
from mlharness.kinds.sessions.traces import load_trace

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


FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def _replayed(tmp_path, name: str) -> tuple[dict, dict[str, list[dict]]]:
    """``mlharness replay`` of a fixture trace: (its sessions by id, the request bodies each session sent, in
    order, the warm-up play of the first one left out)."""
    sessions = {s.id: s for s in load_trace(FIXTURES / name)}
    out = tmp_path / name.split(".")[0]
    with ChatServer() as server:
        rc = main(["replay", str(FIXTURES / name), "--endpoint", server.url, "--model", "chat-model",
                   "--think-scale", "0", "--affinity-header", "X-Session-ID", "--output", str(out), "--no-progress"])
        sent: dict[str, list[dict]] = {}
        for r in server.requests:
            sent.setdefault(r["headers"]["X-Session-ID"], []).append(r["body"])
    assert rc == 0
    records = read_records(out / "sessions.jsonl")
    assert sorted(r.session for r in records) == sorted(sessions)  # every session played once
    assert all(r.ok and len(r.turns) == len(sessions[r.session].turns) for r in records)  # every turn
    assert set(sent) == set(sessions)
    return sessions, {sid: bodies[-len(sessions[sid].turns):] for sid, bodies in sent.items()}


def _check_histories(sessions: dict, sent: dict[str, list[dict]]) -> None:
    """Each turn's request holds the whole history: the one before it, the answer (or, diverged, the recorded
    answer), then the turn's own messages from the trace."""
    for sid, bodies in sent.items():
        session = sessions[sid]
        first = [m["content"] for m in bodies[0]["messages"]]
        assert first == ([session.system] if session.system else []) + [
            m.get("content") or "" for m in session.turns[0].messages], sid
        for turn, before, body in zip(session.turns[1:], bodies, bodies[1:], strict=False):
            history, messages = before["messages"], body["messages"]
            assert messages[:len(history)] == history, sid
            assert len(messages) == len(history) + 1 + len(turn.messages) and messages[len(history)]["role"] == \
                "assistant", sid
            assert [m["content"] for m in messages[-len(turn.messages):]] == [m["content"] for m in turn.messages]


def test_sharegpt_conversations_replay_every_turn_with_its_whole_history(tmp_path):
    sessions, sent = _replayed(tmp_path, "sharegpt.json")
    assert {sid: len(s.turns) for sid, s in sessions.items()} == {"QWJhYvA_0": 3, "QWJhYvA_0#1": 1, "weather_2": 2}
    _check_histories(sessions, sent)
    assert sent["weather_2"][0]["tools"][0]["function"]["name"] == "get_weather"  # the conversation's tools


def _words(body: dict) -> list[str]:
    return body["messages"][0]["content"].split()


@pytest.mark.parametrize("name", ["mooncake.jsonl", "mooncake_sessions.jsonl"])
def test_mooncake_rows_replay_with_shared_hash_blocks_as_shared_prompt_prefixes(tmp_path, name):
    sessions, sent = _replayed(tmp_path, name)
    _check_histories(sessions, sent)
    block = 512  # words of a Mooncake block (one token each)
    if name == "mooncake.jsonl":  # rows 0 and 1 share hash ids [0, 1]; row 2 starts with another block
        a, b, c = (_words(sent[f"row-{k}"][0]) for k in range(3))
        assert a[:2 * block] == b[:2 * block] and a[2 * block:3 * block] != b[2 * block:3 * block]
        assert a[:block] != c[:block]
        assert [sent[f"row-{k}"][0]["max_tokens"] for k in range(4)] == [52, 26, 1, 64]  # output_length caps
    else:  # the two sessions' first turns share hash ids [1, 2], then differ
        a, b = _words(sent["g0000-s0"][0]), _words(sent["g0001-s0"][0])
        assert a[:2 * block] == b[:2 * block] and a[2 * block:3 * block] != b[2 * block:3 * block]
        assert {sid: len(bodies) for sid, bodies in sent.items()} == {"g0000-s0": 3, "g0001-s0": 2}
