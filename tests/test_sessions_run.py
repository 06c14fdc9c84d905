"""Session models in real LoadGen runs: one sample is one session of turns, played against a local chat server
with tool calls (tests/helpers/session_server.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.session_server import ChatServer, tiny_trace

from mlharness.errors import ManifestError, RunFailed
from mlharness.kinds.sessions.input import as_session, session_settings
from mlharness.kinds.sessions.records import read_records
from mlharness.kinds.sessions.report import ms_text, session_rows, summarize
from mlharness.run.runner import RunOptions, run

pytest.importorskip("mlperf_loadgen")

PREPROCESS = ("import json\nfrom pathlib import Path\n\n\ndef preprocess(ctx, index):\n"
              "    return json.loads((Path(ctx['dataset_path']) / 'trace.json').read_text())[index]\n")


def session_manifest(tmp: Path, url: str, trace: list[dict], **params) -> Path:
    (tmp / "trace.json").write_text(json.dumps(trace))
    m = {"name": "chat-sessions", "framework": {"name": "openai", "version": "*", "warmup": 0,
                                                "options": {"endpoints": [url]}},
         "inputs": [{"name": "session", "type": "session",
                     "parameters": {"affinity_header": "X-Session-ID", **params}}],
         "outputs": [{"name": "answers", "element_type": "uint8"}],
         "response": {"kind": "session"},
         "dataset": {"name": "trace", "init": f"def init(count):\n    return count or {len(trace)}\n"},
         "preprocess": PREPROCESS}
    path = tmp / "sessions.yaml"
    path.write_text(yaml.safe_dump(m))
    return path


def accuracy_log(out: Path) -> list[dict]:
    return [{"qsl_idx": e["qsl_idx"], **json.loads(bytes.fromhex(e["data"]).decode())}
            for e in json.loads((out / "mlperf_log_accuracy.json").read_text())]


@pytest.mark.parametrize("scenario", ["SingleStream", "Server"])
def test_every_session_is_one_sample_completed_once_with_its_turns_recorded(tmp_path, scenario):
    trace = tiny_trace(3, turns=3)
    with ChatServer(delay_s=0.002) as server:
        manifest = session_manifest(tmp_path, server.url, trace)
        result = run(RunOptions(scenario=scenario, mode="accuracy", manifest=manifest, dataset_path=tmp_path,
                                output=tmp_path / "out"))
        requests = len(server.requests)
    out = result.output
    log = accuracy_log(out)
    assert sorted(e["qsl_idx"] for e in log) == [0, 1, 2]  # every sample completed exactly once
    for e in log:  # the response is every answer of the sample's own session, in order
        assert e["session"] == f"s{e['qsl_idx']}" and len(e["answers"]) == 3
        assert e["answers"][0]["tool_calls"][0]["name"] == "read_file"
        assert e["answers"][1]["content"] == "answer 2"  # the server counts the user message and the tool result
    records = read_records(out / "sessions.jsonl")
    assert sorted(r.session for r in records) == ["s0", "s1", "s2"] and requests == 9
    assert all(r.ok and [t.turn for t in r.turns] == [0, 1, 2] for r in records)
    assert all(t.ttft_s is not None and 0 < t.ttft_s <= t.latency_s for r in records for t in r.turns)
    summary = json.loads((out / "sessions_summary.json").read_text())
    assert summary == json.loads(json.dumps(summarize(records, {}, summary["wall_s"], scenario,
                                                      summary["server_cache"])))
    assert summary["sessions_ok"] == 3 and summary["turns"] == 9
    assert [p["turns"] for p in summary["per_turn"]] == [3, 3, 3]
    lat = sorted(r.latency_s * 1e3 for r in records)
    assert summary["session_latency_ms"]["p50"] == pytest.approx(lat[1])
    cached = sum(t.cached_tokens for r in records for t in r.turns)
    prompt = sum(t.prompt_tokens for r in records for t in r.turns)
    assert cached > 0 and summary["client_hit_rate"] == pytest.approx(cached / prompt)
    assert summary["goodput"]["good_sessions"] == 3  # no SLO given: every session that ended well is good


def test_offline_recorded_timing_starts_no_session_before_its_start_s(tmp_path):
    trace = tiny_trace(3, turns=2, gap_s=0.3)
    with ChatServer() as server:
        manifest = session_manifest(tmp_path, server.url, trace, timing="recorded", slo_session_ms=60000)
        result = run(RunOptions(scenario="Offline", mode="accuracy", manifest=manifest, dataset_path=tmp_path,
                                output=tmp_path / "out"))
    records = {r.session: r for r in read_records(result.output / "sessions.jsonl")}
    # issued together, started as recorded: s_k no sooner than 0.3 k s after the issue, and s0 (start_s 0) at the
    # issue; s0's own start may come late on a busy host, which only shortens the gaps measured from it, so the
    # tolerance covers a late s0 (a session started early would still fail by 0.2 s and more)
    t0 = records["s0"].started
    assert t0 == min(r.started for r in records.values())
    for k in (1, 2):
        assert records[f"s{k}"].started - t0 >= 0.3 * k - 0.1
    summary = json.loads((result.output / "sessions_summary.json").read_text())
    assert summary["goodput"]["fraction"] == 1.0 and summary["slo"] == {"slo_session_ms": 60000.0}
    # what mlharness run prints under its result for this run
    rows = dict(session_rows(result.output))
    assert rows["sessions"] == "3 ok, 0 failed, 6 turns"
    assert rows["session latency"] == f"p90 {ms_text(summary['session_latency_ms']['p90'])} ms"
    assert rows["per turn"].startswith("TTFT p90 ") and ", TPOT p90 " in rows["per turn"]
    assert rows["cached prompt share"] == f"client {summary['client_hit_rate']:.1%}"  # the server has no /metrics
    assert rows["goodput"].startswith("3 of 3 sessions (100%), ") and rows["goodput"].endswith(
        " sessions/s within slo_session_ms 60000")


def test_a_failing_server_ends_the_run_with_an_error_naming_session_and_turn(tmp_path):
    with ChatServer(fail_at=2) as server:  # SingleStream: the first session's second turn is refused
        manifest = session_manifest(tmp_path, server.url, tiny_trace(3, turns=3))
        with pytest.raises(RunFailed, match=r"session 's\d' \(sample \d, qsl_idx\) failed at turn 1: .*HTTP 500"):
            run(RunOptions(scenario="SingleStream", mode="accuracy", manifest=manifest, dataset_path=tmp_path,
                           output=tmp_path / "out"))
    failed = next(tmp_path.glob("out.failed-*"))
    records = read_records(failed / "sessions.jsonl")
    assert len(records) == 1 and records[0].error and records[0].turns[1].error


def test_session_inputs_and_parameters_are_checked_naming_the_field():
    with pytest.raises(ValueError, match=r"turns\[1\]\.think_s"):
        as_session({"id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}]},
                                         {"messages": [], "think_s": -1}]})
    with pytest.raises(ManifestError, match=r"inputs\[0\]\.parameters\.history"):
        session_settings({"history": "made-up"}, "m.yaml")
    with pytest.raises(ManifestError, match=r"parameters\.speed.*known: history"):
        session_settings({"speed": 2}, "m.yaml")
    s = session_settings({"timing": "asap", "concurrency": 2, "slo_ttft_ms": 50, "think_scale": 0}, "m.yaml")
    assert (s.timing, s.concurrency, s.slo, s.replay) == ("asap", 2, {"slo_ttft_ms": 50.0}, {"think_scale": 0.0})
