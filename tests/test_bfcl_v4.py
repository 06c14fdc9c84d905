"""BFCL v4 (qwen3.6-27b's accuracy): the data, the MLPerf selection, the sessions and the score, compared with the
MLCommons endpoints reference's own scorer (its output kept in tests/fixtures/bfcl_v4/reference_scores.json beside
the log it scored; run_reference.py there regenerates it) and, where MLHARNESS_BFCL_PYTHON names bfcl-eval's
environment, scored for real with bfcl-eval's AST checker."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlharness.errors import AccuracyError
from mlharness.kinds.sessions.model import Answer, ToolCall
from mlharness.tasks.base import AccuracyContext
from mlharness.tasks.bfcl_v4.dataset import load_entries, mlperf_selection, to_session, to_tools
from mlharness.tasks.bfcl_v4.extract import extract
from mlharness.tasks.bfcl_v4.metric import aggregate, read_answers, score_log
from mlharness.tasks.bfcl_v4.models import oracle_log, session_response, write_accuracy_log
from mlharness.tasks.bfcl_v4.oracle import oracle_answer
from mlharness.tasks.bfcl_v4.synth import write_synthetic_bfcl_v4

FIXTURES = Path(__file__).parent / "fixtures" / "bfcl_v4"
PYTHON = os.environ.get("MLHARNESS_BFCL_PYTHON")
needs_bfcl = pytest.mark.skipif(not PYTHON, reason="MLHARNESS_BFCL_PYTHON (bfcl-eval's environment) is not set")


def _call(name: str, **args: object) -> ToolCall:
    return ToolCall(id="call_x", name=name, arguments=json.dumps(args))


def mistakes(entries: list) -> dict[str, Answer]:
    """One answer per entry: the ground truth except where a kind of mistake is made on purpose."""
    answers = {e.id: oracle_answer(e) for e in entries}
    answers.update({
        "simple_python_0": Answer(content=None, tool_calls=(_call("get_weather", city="Paris"),)),  # wrong name
        "simple_python_1": Answer(content=None, tool_calls=(  # an argument of the wrong type
            _call("geometry_triangle_area", base="12", height=5),)),
        "multiple_0": Answer(content=None, tool_calls=(_call("get_weather", celsius=True),)),  # a required one out
        "parallel_0": Answer(content=None, tool_calls=oracle_answer(entries[[e.id for e in entries].index(
            "parallel_0")]).tool_calls + (_call("get_weather", city="Rome"),)),  # an extra call
        "parallel_multiple_0": Answer(content="I would look up the weather for you first."),  # text, no call
        "live_simple_0-0-0": Answer(content="notes_tag(note_id=5, tags=['urgent'])"),  # a call written as text
        "live_multiple_0-0-0": Answer(content=None, tool_calls=(  # arguments that are not JSON
            ToolCall(id="c", name="physics_final_speed", arguments="{height: 3"),)),
        "simple_java_0": Answer(content=None, tool_calls=(_call("Cache_put", key="session0", ttl=5),)),  # not text
        "irrelevance_0": Answer(content="I cannot help with that."),  # a right abstention
        "irrelevance_1": Answer(content=None, tool_calls=(_call("geometry_triangle_area", base=1, height=2),)),
        "live_irrelevance_0-0-0": Answer(content=None, tool_calls=(_call("get_weather", city="Oslo"),)),
    })
    return answers


def _synth(tmp_path: Path) -> Path:
    return write_synthetic_bfcl_v4(tmp_path / "bfcl", count=3, seed=0)


def _mistakes_log(tmp_path: Path, data: Path) -> Path:
    selected = mlperf_selection(load_entries(data))
    answers = mistakes(selected)
    return write_accuracy_log(tmp_path / "mlperf_log_accuracy.json",
                              ((i, session_response(e.id, [answers[e.id]])) for i, e in enumerate(selected)))


def test_synthetic_set_is_official_layout_and_deterministic(tmp_path):
    a, b = write_synthetic_bfcl_v4(tmp_path / "a"), write_synthetic_bfcl_v4(tmp_path / "b")
    files = sorted(p.relative_to(a) for p in a.rglob("*.json"))
    assert len(files) == 12 + 10  # every subset, possible answers for all but the two irrelevance subsets
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    entries = load_entries(a)
    assert {e.subset for e in entries} == {e.subset for e in mlperf_selection(entries)}
    assert [e.id for e in mlperf_selection(entries)] == [e.id for e in sorted(entries, key=lambda e: e.subset)]


def test_selection_takes_the_head_of_each_subset_floor_and_rates(tmp_path):
    data = write_synthetic_bfcl_v4(tmp_path / "d", count=40)
    chosen = mlperf_selection(load_entries(data))
    by = {}
    for e in chosen:
        by.setdefault(e.subset, []).append(e.id)
    assert len(by["simple_python"]) == int(40 * 62 / 100) and by["simple_python"][0] == "simple_python_0"
    assert len(by["live_simple"]) == 4 and len(by["irrelevance"]) == 4  # 10 %
    assert list(by) == sorted(by)  # subsets in pandas' groupby order
    assert len(mlperf_selection(load_entries(data), subset_floor=40)) == 12 * 40


def test_session_carries_messages_tools_and_oracle(tmp_path):
    entries = {e.id: e for e in load_entries(_synth(tmp_path))}
    s = to_session(entries["live_multiple_0-0-0"])
    assert [m["role"] for m in s.turns[0].messages] == ["system", "user"] and s.system is None
    names = [t["function"]["name"] for t in s.tools]
    assert names == ["geometry_triangle_area", "physics_final_speed"]  # dots replaced, as OpenAI requires
    speed = s.tools[1]["function"]["parameters"]
    assert speed["type"] == "object" and speed["properties"]["height"]["type"] == "number"
    assert speed["properties"]["height"]["format"] == "float"
    assert s.meta["tool_choice"] == "auto" and s.turns[0].recorded["tool_calls"][0]["function"]["name"] == \
        "physics_final_speed"
    java = oracle_answer(entries["simple_java_1"]).tool_calls[0].parsed()
    assert java["ttl"].endswith("L") and java["pinned"] == "true"  # Java arguments are source text


def test_extractor_reads_text_calls_as_the_reference_does():
    assert json.loads(extract("get_weather(city='London')")) == [{"name": "get_weather",
                                                                   "arguments": {"city": "London"}}]
    assert extract("Here (is) nothing", default="[]") == "[]"
    assert json.loads(extract('[{"name": "f", "arguments": {"a": 1}}]')) == [{"name": "f", "arguments": {"a": 1}}]


def test_aggregate_matches_the_reference_breakdown_rules():
    subsets = ["simple_python"] * 2 + ["simple_java"] + ["multiple"] + ["live_simple"] * 3 + ["live_multiple"] + \
        ["irrelevance", "live_irrelevance"]
    scores = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    b = aggregate(subsets, scores)
    assert b["category_scores"]["non_live"] == round(((0.5 + 1.0) / 2 + 0.0) / 2 * 100, 2)  # hierarchical
    assert b["category_scores"]["live"] == 75.0 and b["category_scores"]["hallucination"] == 50.0
    assert b["overall_accuracy"] == 60.0


def test_log_must_hold_session_answers(tmp_path):
    bad = write_accuracy_log(tmp_path / "log.json", [(0, b"\x01\x02")])
    with pytest.raises(AccuracyError, match="UTF-8 JSON"):
        read_answers(bad)
    data = _synth(tmp_path)
    unknown = write_accuracy_log(tmp_path / "u.json", [(0, session_response("nope_1", [Answer(content="x")]))])
    with pytest.raises(AccuracyError, match="not entries"):
        score_log(unknown, data, python=PYTHON or "python-not-needed")


def test_mistakes_log_fixture_is_what_the_synthetic_set_gives(tmp_path):
    made = _mistakes_log(tmp_path, _synth(tmp_path))
    assert json.loads(made.read_text()) == json.loads((FIXTURES / "mistakes_log.json").read_text())


def test_reference_selection_is_ours(tmp_path):
    ref = json.loads((FIXTURES / "reference_scores.json").read_text())
    assert [e.id for e in mlperf_selection(load_entries(_synth(tmp_path)))] == ref["selection"]


@needs_bfcl
def test_oracle_scores_the_maximum(tmp_path):
    data = _synth(tmp_path)
    log = oracle_log(tmp_path / "oracle.json", mlperf_selection(load_entries(data)))
    result = score_log(log, data, python=PYTHON)
    assert result.value == 100.0 and result.text.startswith("mAP=100.0\n") and result.official
    assert result.details["normalized_single_turn_score"] == 100.0


@needs_bfcl
def test_mistakes_score_as_the_reference_scores_them(tmp_path):
    ref = json.loads((FIXTURES / "reference_scores.json").read_text())
    result = score_log(FIXTURES / "mistakes_log.json", _synth(tmp_path), python=PYTHON)
    ours = {v["id"]: v["score"] for v in result.details["verdicts"]}
    assert ours == ref["per_entry"]
    assert sum(1 for s in ours.values() if s == 0.0) == 10  # every planted mistake is caught, nothing else
    breakdown = {k: v for k, v in result.details.items() if k in ref["breakdown"]}
    assert breakdown == ref["breakdown"]
    assert result.text.splitlines()[0] == f"mAP={ref['breakdown']['overall_accuracy']}"


@needs_bfcl
def test_metric_reads_the_run_and_a_partial_log_is_not_official(tmp_path):
    from mlharness.tasks import METRICS

    data = _synth(tmp_path)
    selected = mlperf_selection(load_entries(data))
    log = oracle_log(tmp_path / "part.json", selected[:5])
    metric = METRICS.get("bfcl_v4")()
    result = metric.score(log, AccuracyContext(dataset_path=data, count=5, options={"bfcl_python": PYTHON}))
    assert not result.official and result.text.startswith("subset of 5 of 36") and "mAP=" not in result.text


@needs_bfcl
def test_tools_match_bfcl_evals_own_conversion(tmp_path):
    """Every function doc of the synthetic set and of bfcl-eval's real data converts as convert_to_tool does."""
    import subprocess

    from mlharness.tasks.bfcl_v4.dataset import bfcl_data_dir

    entries = load_entries(_synth(tmp_path)) + load_entries(bfcl_data_dir(PYTHON))
    (tmp_path / "f.json").write_text(json.dumps([e.function for e in entries]))
    code = ("import json,sys; from bfcl_eval.constants.enums import ModelStyle as M; "
            "from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI as G; "
            "from bfcl_eval.model_handler.utils import convert_to_tool as c; "
            "json.dump([c(f, G, M.OPENAI_COMPLETIONS) for f in json.load(open(sys.argv[1]))], open(sys.argv[2], 'w'))")
    subprocess.run([PYTHON, "-c", code, str(tmp_path / "f.json"), str(tmp_path / "t.json")], check=True,
                   timeout=300, cwd=tmp_path, env={**os.environ, "BFCL_PROJECT_ROOT": str(tmp_path)})
    theirs = json.loads((tmp_path / "t.json").read_text())
    assert len(theirs) > 3000 and [to_tools(e.function) for e in entries] == theirs


@needs_bfcl
def test_real_mlperf_selection_has_995_entries_and_the_oracle_nearly_all(tmp_path):
    from mlharness.tasks.bfcl_v4.dataset import bfcl_data_dir

    data = bfcl_data_dir(PYTHON)
    selected = mlperf_selection(load_entries(data))
    assert len(selected) == 995  # the checker's accuracy sample count for qwen3.6-27b
    result = score_log(oracle_log(tmp_path / "o.json", selected), data, python=PYTHON)
    missed = {v["id"] for v in result.details["verdicts"] if v["score"] < 1}
    assert missed == {"simple_java_36"}  # a mixed-type Java list no argument text converts back to
