"""Traces read as sessions: each format from a small fixture, the real qwen3.6-27b performance trace of the MLCommons
endpoints repository (its histories compared with the reference's own builder where the mirror is here), the
synthetic trace, and malformed traces named by file, line and field."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mlharness.errors import DatasetError
from mlharness.kinds.sessions.model import Session
from mlharness.kinds.sessions.synth import synthetic_agentic_trace
from mlharness.kinds.sessions.trace_mooncake import BLOCK_TOKENS
from mlharness.kinds.sessions.traces import FORMATS, load_trace

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
# a git repository of mlcommons/endpoints (bare or not): MLHARNESS_ENDPOINTS_GIT, else where this machine mirrors it
ENDPOINTS = Path(os.environ.get("MLHARNESS_ENDPOINTS_GIT", "/work/.mirror/mlcommons+endpoints/repo"))
REAL = "examples/11_Edge_Agentic_Example/agentic_coding_2.5h.jsonl"
REFERENCE = "src/inference_endpoint/dataset_manager/agentic_inference_dataset.py"


def recorded_history(session: Session, k: int) -> list[dict[str, Any]]:
    """What turn k sends when the history holds the recorded answers (the endpoints reference's replay)."""
    out = [{"role": "system", "content": session.system}] if session.system else []
    for turn in session.turns[:k]:
        out += [*turn.messages, turn.recorded]
    return out + list(session.turns[k].messages)


def test_formats_are_named_and_described():
    assert set(FORMATS) == {"agentic", "sharegpt", "mooncake"}
    assert all(f.description and callable(f.read) for f in FORMATS.values())


def test_agentic_fixture_builds_turns_as_the_reference_does():
    sessions = load_trace(FIXTURES / "agentic.jsonl")
    assert [s.id for s in sessions] == ["fix-cache-ttl", "hello"]
    s = sessions[0]
    assert s.system.startswith("You are a helpful assistant")
    assert [t["function"]["name"] for t in s.tools] == ["bash"]
    assert s.meta["turn_numbers"] == [1, 3, 5, 7, 9]
    assert [t.think_s for t in s.turns] == [0.0, 0.36833, 0.055529, 4.5, 2.0]
    assert [t.max_tokens for t in s.turns] == [512, 512, 256, 512, 512]  # the first user row's cap holds
    # a client row naming other tools has them as its own; the others use the session's
    assert [None if t.tools is None else [x["function"]["name"] for x in t.tools] for t in s.turns] == \
        [None, None, None, ["run_tests"], None]
    assert s.meta["turn_params"] == {3: {"temperature": 0}}
    first, second = s.turns[0], s.turns[1]
    assert first.messages == ({"role": "user", "content": first.messages[0]["content"]},)
    assert first.recorded["content"] is None and first.recorded["reasoning_content"] == \
        "Find where the lifetime is read."
    assert second.messages == ({"role": "tool", "tool_call_id": "functions.bash:0",
                                "content": "<returncode>0</returncode>\n<output>\n41:    if lifetime:\n</output>"},)
    # parallel calls: one tool message per result; arguments given as an object become their JSON text
    calls = second.recorded["tool_calls"]
    assert [c["id"] for c in calls] == ["functions.bash:1", "functions.bash:2"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"command": "grep -rn 'put(' src"}
    assert [m["tool_call_id"] for m in s.turns[2].messages] == ["functions.bash:1", "functions.bash:2"]
    assert s.turns[-1].recorded is None  # the trace ends on a tool row: no answer recorded
    hello = sessions[1]  # its rows are out of turn order in the file: sorted by turn, as the reference does
    assert hello.system is None and hello.tools == ()
    assert [t.messages[0]["content"] for t in hello.turns] == ["Hi there.", "What is 2 + 2?"]
    assert [t.recorded["content"] for t in hello.turns] == ["Hello! How can I help?", "4."]
    hist = recorded_history(hello, 1)
    assert [m["role"] for m in hist] == ["user", "assistant", "user"]


def test_sharegpt_json_array():
    sessions = load_trace(FIXTURES / "sharegpt.json")
    # the repeated id is told apart; the conversation with no user message is skipped
    assert [s.id for s in sessions] == ["QWJhYvA_0", "QWJhYvA_0#1", "weather_2"]
    plots = sessions[0]
    assert plots.system == "You are a concise assistant."
    assert [t.messages[0]["content"] for t in plots.turns] == [
        "Summarise the plot of Hamlet in one sentence.", "And Macbeth?", "Which is shorter?"]
    assert plots.turns[1].recorded["content"].startswith("A Scottish general")
    assert plots.turns[2].recorded is None
    haiku = sessions[1]  # a leading answer is history of the first turn; two answers in a row are one
    assert [m["role"] for m in haiku.turns[0].messages] == ["assistant", "user"]
    assert haiku.turns[0].recorded["content"].count("\n") == 3
    weather = sessions[2]  # LLaMA-Factory's tool-calling variant: tools as JSON text, function_call, observation
    assert weather.tools[0]["function"]["name"] == "get_weather"
    calls = weather.turns[0].recorded["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == ["Oslo", "Bergen"]
    assert [(m["role"], m["tool_call_id"]) for m in weather.turns[1].messages] == \
        [("tool", calls[0]["id"]), ("tool", calls[1]["id"])]
    assert weather.turns[1].recorded["content"] == "Oslo is 4 °C, Bergen 7 °C."


def test_sharegpt_messages_variant_jsonl():
    calc, yes = load_trace(FIXTURES / "sharegpt_messages.jsonl", "sharegpt")
    assert (calc.id, calc.system, yes.id) == ("calc-1", "Use the tools.", "1")
    assert calc.tools[0]["function"]["name"] == "add"
    assert calc.turns[0].recorded["tool_calls"][0]["id"] == "call_7"
    assert calc.turns[1].messages == ({"role": "tool", "tool_call_id": "call_7", "content": "42"},)
    assert calc.turns[1].recorded == {"role": "assistant", "content": "2 + 40 = 42."}


def test_mooncake_prompts_share_text_where_hash_ids_share_blocks():
    sessions = load_trace(FIXTURES / "mooncake.jsonl")
    assert [s.start_s for s in sessions] == [0.0, 0.105, 0.274, 1.0]
    assert [s.turns[0].max_tokens for s in sessions] == [52, 26, 1, 64]  # output_length 0 asks for one token
    words = [s.turns[0].messages[0]["content"].split(" ") for s in sessions]
    assert [len(w) for w in words] == [1200, 1800, 300, 700]  # one word a token
    # rows 0 and 1 share blocks 0 and 1 (1024 tokens) and then differ
    assert words[0][: 2 * BLOCK_TOKENS] == words[1][: 2 * BLOCK_TOKENS]
    assert words[0][2 * BLOCK_TOKENS:2 * BLOCK_TOKENS + 20] != words[1][2 * BLOCK_TOKENS:2 * BLOCK_TOKENS + 20]
    assert words[2][:50] != words[0][:50]
    # the text of a block is fixed by its id, in any process and run
    assert words[0][:6] == ["up", "east", "their", "within", "they", "used"]
    again = load_trace(FIXTURES / "mooncake.jsonl", "mooncake")
    assert [s.turns for s in again] == [s.turns for s in sessions]


def test_mooncake_sessions_group_turns_with_delays():
    a, b = load_trace(FIXTURES / "mooncake_sessions.jsonl")
    assert (a.id, b.id, a.start_s, b.start_s) == ("g0000-s0", "g0001-s0", 0.0, 0.25)
    assert [t.think_s for t in a.turns] == [0.0, 6.824, 1.5]
    assert [t.max_tokens for t in a.turns] == [256, 128, 16]
    assert [len(t.messages[0]["content"].split(" ")) for t in a.turns] == [2048, 1024, 100]
    first_a, first_b = (s.turns[0].messages[0]["content"].split(" ") for s in (a, b))
    assert first_a[:1024] == first_b[:1024] and first_a[1024:] != first_b[1024:]
    assert a.meta["hash_ids"][1] == [9689, 9690]


def test_synthetic_trace_is_deterministic_and_loads(tmp_path):
    one = synthetic_agentic_trace(tmp_path / "a.jsonl", sessions=3, turns=4, seed=0)
    two = synthetic_agentic_trace(tmp_path / "b.jsonl", sessions=3, turns=4, seed=0)
    other = synthetic_agentic_trace(tmp_path / "c.jsonl", sessions=3, turns=4, seed=1)
    assert one.read_bytes() == two.read_bytes() != other.read_bytes()
    sessions = load_trace(one)
    assert len(sessions) == 3 and all(len(s.turns) == 4 for s in sessions)
    for s in sessions:
        assert s.system and s.tools[0]["function"]["name"] == "bash"
        assert s.turns[0].messages[0]["role"] == "user"
        assert all(t.messages[0]["role"] == "tool" and t.think_s > 0 for t in s.turns[1:])
        for t in s.turns[:-1]:
            for call in t.recorded["tool_calls"]:
                assert set(json.loads(call["function"]["arguments"])) == {"command"}
        assert s.turns[-1].recorded["content"] and "tool_calls" not in s.turns[-1].recorded
    assert any(len(t.messages) == 2 for s in sessions for t in s.turns)  # a parallel call's two results
    single = load_trace(synthetic_agentic_trace(tmp_path / "d.jsonl", sessions=1, turns=1))
    assert len(single[0].turns) == 1


@dataclass
class _Entry:  # stands in for the reference's ConversationSampleEntry
    conversation_id: str
    turn: int
    sample_index: int | None = None


def reference_builder():
    """The endpoints reference's own functions that build each client turn's messages, read from the mirror."""
    pd = pytest.importorskip("pandas")
    source = subprocess.run(["git", "-C", str(ENDPOINTS), "show", f"HEAD:{REFERENCE}"], capture_output=True,
                            text=True, timeout=30, check=True).stdout
    tree = ast.parse(source)
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef)
              and n.name in ("_expand_tool_results", "_build_conversation_metadata")]
    assert len(wanted) == 2, "the reference's builder functions moved"
    scope = {"pd": pd, "Any": Any, "logger": __import__("logging").getLogger("reference"),
             "InputValidationError": ValueError, "ConversationSampleEntry": _Entry}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), REFERENCE, "exec"), scope)
    return pd, scope["_build_conversation_metadata"]


@pytest.mark.skipif(not ENDPOINTS.exists(), reason="the mlcommons/endpoints mirror is not on this machine")
def test_real_endpoints_trace_loads_and_matches_the_reference(tmp_path):
    trace = tmp_path / "agentic_coding_2.5h.jsonl"
    with open(trace, "wb") as f:
        subprocess.run(["git", "-C", str(ENDPOINTS), "show", f"HEAD:{REAL}"], stdout=f, timeout=60, check=True)
    sessions = load_trace(trace)
    assert len(sessions) == 20 and sum(len(s.turns) for s in sessions) == 1007
    assert all(t.recorded is not None for s in sessions for t in s.turns)
    pd, build = reference_builder()
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    for s in sessions:
        frame = pd.DataFrame([r for r in rows if r["conversation_id"] == s.id])
        _, messages, delays, _, count = build(s.id, frame)
        assert count == len(s.turns)
        for k, number in enumerate(s.meta["turn_numbers"]):
            assert recorded_history(s, k) == messages[(s.id, number)], (s.id, number)
            assert s.turns[k].think_s == delays.get((s.id, number), 0.0)


BASE = [
    '{"conversation_id": "c1", "turn": 1, "role": "user", "content": "hi", "tools": []}',
    '{"conversation_id": "c1", "turn": 2, "role": "assistant", "tool_calls": [{"id": "a", "type": "function", '
    '"function": {"name": "bash", "arguments": "{}"}}]}',
    '{"conversation_id": "c1", "turn": 3, "role": "tool", "tool_results": [{"tool_call_id": "a", "content": "ok"}]}',
    '{"conversation_id": "c1", "turn": 4, "role": "assistant", "content": "done"}',
    '{"conversation_id": "c2", "turn": 1, "role": "user", "content": "again"}',
]


def malformed(line: int, text: str) -> list[str]:
    rows = list(BASE)
    rows[line - 1] = text
    return rows


@pytest.mark.parametrize("rows, where, message", [
    (malformed(3, '{"conversation_id": "c1", "turn": 3, "role": "tool", "tool_results": [}'), ":3:",
     "invalid JSON"),
    (malformed(2, BASE[1].replace('"turn": 2', '"turn": "x"')), ":2: field 'turn'",
     "must be a whole number, got 'x'"),
    (malformed(4, BASE[3].replace('"conversation_id": "c1", ', "")), ":4: field 'conversation_id'", "missing"),
    (malformed(4, BASE[3].replace('"assistant"', '"robot"')), ":4: field 'role'", 'got "robot"'),
    (malformed(3, BASE[2].replace('"tool_call_id": "a"', '"tool_call_id": "zz"')),
     ":3: field 'tool_results[0].tool_call_id'", '"zz" matches no earlier tool call'),
    (malformed(3, BASE[2].replace('"tool_results": [{"tool_call_id": "a", "content": "ok"}]', '"tool_results": []')),
     ":3: field 'tool_results'", "non-empty list"),
    (malformed(2, BASE[1].replace('"type": "function"', '"type": "code"')), ":2: field 'tool_calls[0].type'",
     'expected "function"'),
    (malformed(3, BASE[2].replace('"turn": 3', '"turn": 3, "delay_seconds": -1')), ":3: field 'delay_seconds'",
     "must be >= 0 s, got -1"),
    (malformed(3, BASE[2].replace('"turn": 3', '"turn": 5')), ":3: field 'turn'", "turn 5 in conversation 'c1' of 4 rows"),
    (malformed(3, BASE[2].replace('"turn": 3', '"turn": 2')), ":3: field 'turn'", "appears twice (also at line 2)"),
    (malformed(3, BASE[2].replace('"tool"', '"user"').replace('"tool_results"', '"content": "x", "r"')),
     ":3: field 'role'", "a 'tool' row with their results comes first"),
    (malformed(1, BASE[0].replace('"user"', '"tool"')), ":1: field 'role'", "starts with a 'tool' row"),
    ([*BASE, '{"conversation_id": "c1", "turn": 5, "role": "user", "content": "late"}'],
     ":6: field 'conversation_id'", "not consecutive (its earlier rows end at line 4)"),
    (malformed(1, BASE[0].replace('"tools": []', '"tools": "bash"')), ":1: field 'tools'", "expected a list"),
])
def test_malformed_agentic_trace_names_line_and_field(tmp_path, rows, where, message):
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(DatasetError) as err:
        load_trace(path, "agentic")
    assert f"trace.jsonl{where}" in str(err.value) and message in str(err.value), str(err.value)


@pytest.mark.parametrize("fmt, text, where, message", [
    ("sharegpt", '[\n  {"conversations": [{"from": "human", "value": "a"}]},\n  {"conversations": [{"from": "alien", '
     '"value": "b"}]}\n]', ":3: field 'conversations[0].from'", 'got "alien"'),
    ("sharegpt", '{"messages": [{"role": "user", "content": "a"}]}\n{"id": 7}', ":2: field 'messages'", "missing"),
    ("mooncake", '{"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [1, 2]}',
     ":1: field 'hash_ids'", "2 block ids for input_length 1200"),
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
     '{"timestamp": 0, "input_length": 10, "output_length": "x"}', ":2: field 'output_length'", "got 'x'"),
    ("auto", '{"prompt": "x"}', ":1:", "cannot tell the trace's format"),
])
def test_malformed_other_traces_name_line_and_field(tmp_path, fmt, text, where, message):
    path = tmp_path / "trace.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(DatasetError) as err:
        load_trace(path, fmt)
    assert f"trace.jsonl{where}" in str(err.value) and message in str(err.value), str(err.value)


def test_auto_tells_formats_apart_and_unknown_names_are_refused(tmp_path):
    for name, fmt in [("agentic.jsonl", "agentic"), ("sharegpt.json", "sharegpt"), ("mooncake.jsonl", "mooncake")]:
        assert load_trace(FIXTURES / name) == load_trace(FIXTURES / name, fmt)
    with pytest.raises(DatasetError, match="did you mean 'sharegpt'"):
        load_trace(FIXTURES / "sharegpt.json", "sharegtp")
    with pytest.raises(DatasetError, match="no such trace file"):
        load_trace(tmp_path / "absent.jsonl")


def test_cli_replay_of_a_malformed_trace_exits_2_naming_line_and_field(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"conversation_id": "c1", "turn": 1, "role": "user", "content": "hi"}\n'
                     '{"conversation_id": "c1", "turn": "x", "role": "assistant", "content": "a"}\n')
    done = subprocess.run([sys.executable, "-m", "mlharness", "replay", "--endpoint", "http://127.0.0.1:9",
                           "--results-root", str(tmp_path / "results"), "--no-progress", str(trace)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "trace.jsonl:2: field 'turn': must be a whole number, got 'x'" in done.stderr
