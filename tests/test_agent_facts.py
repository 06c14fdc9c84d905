"""Remote agents say what they are: a run over an agent records the agent's host facts and framework (not only the
harness's), a traced run has the agent's spans on the run's one timeline, and a hostile agent answering oversized
or malformed facts or spans leaves the run intact with a warning.

Agents are real ``mlharness agent serve`` processes on 127.0.0.1 (port 0), or, for the hostile ones, an in-process
agent whose answers the test replaces; runs go through the real CLI and LoadGen.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("grpc")

from test_agent import _echo_manifest, _meta, agent  # noqa: E402 - after the importorskip


def _trace(out):
    return json.loads((out / "mlharness_trace.json").read_text())["traceEvents"]


def test_a_run_over_an_agent_records_the_agents_host_and_framework_and_its_spans(run_cli, tmp_path, shared_cache):
    proc = agent(shared_cache).started()
    try:
        out = tmp_path / "acc"
        run = run_cli("run", "--scenario", "Offline", "--agent", proc.address, "--trace", "model", "--output",
                      str(out), "--no-progress")
        assert run.returncode == 0, run.stderr
    finally:
        assert proc.stop() == 0
    meta = _meta(out)
    [entry] = meta["agents"]
    # the agent process's own facts, not the harness's: its pid, and the framework it runs (the harness's is remote)
    assert entry["address"] == proc.address and entry["pid"] == proc.proc.pid != os.getpid()
    assert entry["framework"]["name"] == "onnxruntime" and entry["framework"]["version"]
    assert meta["framework"]["name"] == "remote"
    assert set(entry["host"]) >= {"hostname", "cpu_model", "cpu_count", "memory_bytes", "os", "python"}
    assert entry["system"]["cpu"]["threads"] == entry["host"]["cpu_count"]  # sysinfo's inventory, taken there
    assert "facts_error" not in entry

    events = _trace(out)
    [name] = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
    assert proc.address in name and f"pid {proc.proc.pid}" in name
    requests = [e for e in events if e.get("cat") == "agent" and e["name"] == "agent.request"]
    runs = [e for e in events if e.get("cat") == "agent" and e["name"] == "agent.run"]
    predicts = [e for e in events if e.get("name") == "predict" and e.get("cat") == "model"]
    assert predicts and len(requests) >= len(predicts) and len(runs) >= len(predicts)
    # each of the harness's predict spans (the round trip) holds one agent request, mapped onto the same clock
    slack_us = 50.0
    for p in predicts:
        inside = [r for r in requests if p["ts"] - slack_us <= r["ts"] and r["ts"] + r["dur"] <= p["ts"] + p["dur"]
                  + slack_us]
        assert len(inside) == 1, (p, requests)

    report = run_cli("report", str(out))
    assert report.returncode == 0, report.stderr
    assert f"agent {proc.address}: host {entry['host']['hostname']}" in report.stdout
    assert f"onnxruntime {entry['framework']['version']}" in report.stdout


def test_network_lon_trace_has_the_agents_pipeline_stages(run_cli, tmp_path, shared_cache):
    proc = agent(shared_cache, "--hooks", "agent").started()
    try:
        out = tmp_path / "lon"
        run = run_cli("run", "--scenario", "Offline", "--network", "lon", "--sut-server", proc.address, "--trace",
                      "model", "--output", str(out), "--no-progress")
        assert run.returncode == 0, run.stderr
    finally:
        assert proc.stop() == 0
    assert _meta(out)["agents"][0]["pid"] == proc.proc.pid
    names = [e["name"] for e in _trace(out) if e.get("cat") == "agent"]
    # Offline sends the query whole; the agent cuts it into batches and times each stage of each
    assert names.count("agent.request") == 1
    for stage in ("agent.run", "agent.gather", "agent.predict", "agent.postprocess"):
        assert names.count(stage) == 256 // 32, (stage, names)


@pytest.mark.parametrize("facts, spans, why", [
    ("x" * 200_000, "y" * 100_000, "RESOURCE_EXHAUSTED"),  # larger than the client accepts
    ('{"host": "not an object", "framework": {}}', '{"d": -1, "s": "no"}', "facts field 'host' is a str"),
    ("[1, 2", '[[["agent.run", 0, 1]]]', "not JSON"),
])
def test_a_hostile_agent_does_not_break_the_run(run_cli, tmp_path, shared_cache, monkeypatch, facts, spans, why):
    import mlharness.agent.server as server_module
    from mlharness.agent.server import AgentConfig, AgentServer

    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    monkeypatch.setattr(server_module, "request_spans", lambda *_: spans)
    server = AgentServer(AgentConfig(manifest=str(_echo_manifest(tmp_path, 0)), port=0))
    server.servicer.facts_text = facts
    address = f"127.0.0.1:{server.start()}"
    try:
        out = tmp_path / "acc"
        run = run_cli("run", "--manifest", str(_echo_manifest(tmp_path, 0)), "--scenario", "Offline", "--agent",
                      address, "--trace", "model", "--count", "64", "--output", str(out), "--no-progress",
                      timeout=60)
    finally:
        server.stop(0)
    assert run.returncode == 0, run.stderr
    assert (out / "accuracy.txt").read_text().startswith("accuracy=100.000%")
    assert "its facts are left out of the run's metadata" in run.stderr and why in run.stderr, run.stderr
    [entry] = _meta(out)["agents"]
    assert why in entry["facts_error"] and "host" not in entry
    assert not [e for e in _trace(out) if e.get("cat") == "agent" and e.get("ph") == "X"]  # bad spans left out
    report = run_cli("report", str(out))
    assert report.returncode == 0 and f"agent {address}: system unknown" in report.stdout, report.stderr
