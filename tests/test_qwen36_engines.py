"""qwen3.6-27b's engines without LoadGen: the tool-call parser of the in-process transformers engine, that engine on
the tiny random Qwen3.6 (its chat template with tools, first-token timing, token counts, a constrained generation
parsed into a tool call), and the session oracle's table played by the real session player."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from mlharness.errors import PredictorError
from mlharness.kinds.sessions.engine import TurnRequest
from mlharness.kinds.sessions.model import Session, Turn
from mlharness.kinds.sessions.oracle import SessionOracleEngine, conversation_key, recorded_turns
from mlharness.kinds.sessions.replay import ReplayOptions, SessionPlayer
from mlharness.kinds.sessions.transformers_engine import parse_answer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def test_tool_call_blocks_are_parsed_into_calls_with_json_arguments():
    text = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
            '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    content, calls, reasoning = parse_answer(text, "call_3")
    assert content == "Let me check." and reasoning is None
    assert [(c.id, c.name) for c in calls] == [("call_3_0", "get_weather"), ("call_3_1", "get_time")]
    assert json.loads(calls[0].arguments) == {"city": "Paris", "days": 2} and calls[1].arguments == "{}"
    # no call: the text is the content; reasoning before </think> is split off
    assert parse_answer("<think>\nhmm\n</think>\n\nIt is sunny.") == ("It is sunny.", (), "hmm")
    assert parse_answer("  \n") == (None, (), None)


def test_malformed_and_cut_tool_calls_are_kept_as_the_model_wrote_them():
    _, calls, _ = parse_answer('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par</tool_call>')
    assert calls[0].name == "get_weather" and calls[0].arguments == '{"city": "Par'
    assert calls[0].parsed() is None  # not JSON: a scorer sees the model's answer fail, not a parser error
    _, calls, _ = parse_answer('<tool_call>\n{"name": "bash", "arguments": {"command": "ls')  # cut by the cap
    assert calls[0].name == "bash" and calls[0].arguments.startswith('{"command": "ls')
    _, calls, _ = parse_answer("<tool_call>not json at all</tool_call>")
    assert calls[0].name == "" and calls[0].arguments == "not json at all"


def test_qwen3_coder_style_function_blocks_are_read_too():
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco, CA\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")
    content, calls, _ = parse_answer(text)
    assert content is None and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "San Francisco, CA", "days": 3}


class _Timing:
    def __init__(self):
        self.at = None

    def first(self):
        if self.at is None:
            self.at = time.perf_counter()


@pytest.fixture(scope="module")
def random_predictor(tmp_path_factory):
    pytest.importorskip("transformers")
    from mlharness.predictors.base import PredictorConfig
    from mlharness.predictors.generative import GenerationConfig
    from mlharness.predictors.transformers import TransformersPredictor
    from mlharness.tasks.qwen36.random_model import ensure_random_model

    path = ensure_random_model(tmp_path_factory.mktemp("qwen36") / "random")
    config = PredictorConfig(model_path=str(path), input_names=["session"], output_names=["answers"],
                             input_specs=[{"name": "session", "type": "session"}],
                             generation=GenerationConfig(max_new_tokens=8))
    predictor = TransformersPredictor(config)
    predictor.load()
    yield predictor
    predictor.close()


def test_the_random_qwen36_answers_a_turn_through_its_chat_template_with_tools(random_predictor):
    engine = random_predictor.chat_engine()
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"}]
    request = TurnRequest("s1", 1, history, TOOLS, max_tokens=6, extra_body={"temperature": 0, "seed": 42})
    prompt = engine.tokenizer.apply_chat_template(history, tools=TOOLS, add_generation_prompt=True,
                                                  tokenize=False, enable_thinking=False)
    # Qwen3's tool format: the tools in the system turn, the earlier call and its result as the model saw them
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # reasoning off
    timing = _Timing()

    async def play():
        sent = time.perf_counter()
        answer = await engine.answer(request, timing)
        return sent, time.perf_counter(), answer

    sent, done, answer = asyncio.run(play())
    assert answer.prompt_tokens == len(engine.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert 1 <= answer.completion_tokens <= 6 and answer.finish_reason in ("stop", "length")
    assert timing.at is not None and sent < timing.at < done  # first token timed while generating
    asyncio.run(engine.aclose())


def test_a_generated_tool_call_comes_back_as_a_tool_call(random_predictor):
    """The random model constrained to write a call (prefix_allowed_tokens_fn): decoded, parsed, counted."""
    from dataclasses import replace

    engine = random_predictor.chat_engine()
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    target = engine.tokenizer(text, add_special_tokens=False)["input_ids"] + [engine.tokenizer.eos_token_id]
    request = TurnRequest("s2", 0, [{"role": "user", "content": "Weather in Oslo?"}], TOOLS, max_tokens=64)
    start = engine.render(request).shape[-1]
    engine.generation = replace(engine.generation, options={
        "prefix_allowed_tokens_fn": lambda batch, ids: [target[min(len(ids) - start, len(target) - 1)]]})
    answer = engine.answer_now(request, _Timing())
    assert [(c.id, c.name, json.loads(c.arguments)) for c in answer.tool_calls] == [
        ("call_0_0", "get_weather", {"city": "Oslo"})]
    assert answer.content is None and answer.finish_reason == "tool_calls"
    assert answer.completion_tokens == len(target)


def _agentic_session() -> Session:
    call = {"id": "functions.bash:0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    return Session(id="conv-1", system="You fix bugs.", tools=tuple(TOOLS), turns=(
        Turn(messages=({"role": "user", "content": "Fix the bug."},),
             recorded={"role": "assistant", "content": "Looking.", "tool_calls": [call]}),
        Turn(messages=({"role": "tool", "tool_call_id": "functions.bash:0", "content": "a.py"},), think_s=0.5,
             recorded={"role": "assistant", "content": "Done: edited a.py."})))


@pytest.mark.parametrize("history", ["recorded", "generated"])
def test_the_session_oracle_answers_every_turn_as_recorded_through_the_player(history):
    session = _agentic_session()
    answers = dict(recorded_turns(session))
    assert len(answers) == 2
    player = SessionPlayer(SessionOracleEngine(answers, "table.json"),
                           ReplayOptions(history=history, think_scale=0.0, cache_bust=True, salt_seed=7))
    record, got = asyncio.run(player.play(session, 0))
    assert record.ok and not any(t.diverged for t in record.turns)
    assert got[0].tool_calls[0].name == "bash" and got[0].content == "Looking."
    assert got[1].content == "Done: edited a.py." and got[1].tool_calls == ()
    assert all(t.first is not None and t.first <= t.done for t in record.turns)


def test_the_session_oracle_refuses_a_conversation_it_does_not_know_naming_session_and_turn():
    session = _agentic_session()
    engine = SessionOracleEngine(dict(recorded_turns(session)), "table.json")
    changed = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the other bug."}]
    with pytest.raises(PredictorError, match=r"session conv-1 turn 0: the table table\.json has no answer .*"
                                             r"the last one 'user': 'Fix the other bug\.'"):
        asyncio.run(engine.answer(TurnRequest("conv-1", 0, changed, TOOLS, 16), _Timing()))
    # the key is content: ids and the cache-bust salt do not change it, a tool or a role does
    base = [{"role": "user", "content": "x", "tool_calls": [{"id": "a", "function": {"name": "f",
                                                                                       "arguments": '{"b":1, "a":2}'}}]}]
    same = [{"role": "user", "content": "[salt: 0123456789ab]\n\nx",
             "tool_calls": [{"id": "z", "function": {"name": "f", "arguments": '{"a": 2, "b": 1}'}}]}]
    assert conversation_key(base, TOOLS) == conversation_key(same, TOOLS)
    assert conversation_key(base, TOOLS) != conversation_key(base, [])
    assert conversation_key(base, TOOLS) != conversation_key([{**base[0], "role": "assistant"}], TOOLS)
