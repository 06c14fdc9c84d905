"""The qwen3.6-27b manifest users run (framework openai, ``--endpoint``): a SingleStream performance run over the
synthetic agentic sessions against a local chat server that answers with tool calls. Every request carries the
reference's settings (temperature 0, seed 42, at most 1024 tokens, the session's tools with tool_choice auto, the
session's id in X-Session-ID) and each turn's history is the trace's recorded one, never the server's answers."""

from __future__ import annotations

import json

import pytest
from helpers.session_server import ChatServer

from mlharness.cli import main
from mlharness.kinds.sessions.records import read_records
from mlharness.kinds.sessions.traces import load_trace
from mlharness.tasks.qwen36.synth import ensure_synthetic_qwen36

pytest.importorskip("mlperf_loadgen")

SERVED = "Qwen3.6-27B-Q4_K_M"  # the manifest's framework.options.model


def as_sent(value):  # noqa: ANN001, ANN201 - what a value is once sent as JSON (tuples become lists)
    return json.loads(json.dumps(value))


def test_the_endpoint_manifest_sends_the_reference_requests_with_recorded_history(tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    data = ensure_synthetic_qwen36(tmp_path / "synth")
    sessions = {s.id: s for s in load_trace(data / "agentic_coding_2.5h.jsonl")}
    out = tmp_path / "perf"
    with ChatServer(model=SERVED) as server:
        rc = main(["run", "--manifest", "qwen3.6-27b", "--endpoint", server.url, "--scenario", "SingleStream",
                   "--mode", "performance", "--dataset-path", str(data), "--min-duration-ms", "100",
                   "--min-query-count", "4", "--output", str(out), "--no-progress"])
        requests = list(server.requests)
    assert rc == 0
    records = read_records(out / "sessions.jsonl")
    assert len(records) >= 4 and all(r.ok and len(r.turns) == len(sessions[r.session].turns) for r in records)
    assert all(r.turns[0].tool_calls == 1 for r in records)  # the server's answer to each task is a tool call
    assert len(requests) >= sum(len(r.turns) for r in records)
    for r in requests:
        body, session = r["body"], sessions[r["headers"]["X-Session-ID"]]
        assert body["model"] == SERVED and body["stream"] is True
        assert (body["temperature"], body["seed"], body["max_tokens"]) == (0, 42, 1024)
        assert body["tools"] == as_sent(session.tools) and body["tool_choice"] == "auto"
        assert body["messages"][0] == {"role": "system", "content": session.system}
        # history recorded: each earlier turn's assistant message is the trace's, never the server's answer
        answers = [m for m in body["messages"] if m["role"] == "assistant"]
        turn = len(answers)
        assert answers == as_sent([t.recorded for t in session.turns[:turn]])
        assert body["messages"][-len(session.turns[turn].messages):] == as_sent(session.turns[turn].messages)
        assert not any(c["id"].startswith("call_") for m in answers for c in m.get("tool_calls") or [])
