"""One validator of numbers (mlharness/numbers.py): every duration, rate, delay, timestamp, timeout, count and
worker number from a flag, a manifest key or a trace row is finite, of its kind and in a stated range, refused
(exit 2) naming where it came from. Each case below was accepted (or crashed) before."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from mlharness import numbers
from mlharness.cli import main
from mlharness.errors import HookError, ManifestError, SettingsError

PIPELINE_TOY = Path(__file__).resolve().parent.parent / "mlharness" / "manifests" / "pipeline-toy" / "pipeline-toy.yaml"


def toy_with(tmp: Path, **stage1: object) -> Path:
    """pipeline-toy with its second stage's keys set to ``stage1``."""
    doc = yaml.safe_load(PIPELINE_TOY.read_text())
    doc["inputs"][0]["parameters"]["stages"][1].update(stage1)
    path = tmp / "m.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False).replace("NAN", ".nan"))
    return path


@pytest.mark.parametrize(("key", "value", "words"), [
    ("timeout_s", float("nan"), "must be a finite number, got nan"),
    ("timeout_s", float("inf"), "must be a finite number, got inf"),
    ("timeout_s", 1e9, "must be <= 604800 s, got 1000000000 (a week)"),
    ("timeout_s", 0, "must be > 0 s, got 0"),
    ("workers", 1_000_000_000, "must be <= 1024, got 1000000000"),
    ("workers", 2.0, "must be a whole number, got 2.0"),
    ("threads", 100_000, "must be <= 1024"),
])
def test_a_stage_number_out_of_range_is_refused_at_validation_naming_the_key(tmp_path, capsys, key, value, words):
    path = toy_with(tmp_path, **{key: value})
    assert main(["manifest", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: field 'inputs[0].parameters.stages[1].{key}': {words}" in " ".join(err.split())


def test_check_names_the_source_and_keeps_each_kinds_error_class():
    with pytest.raises(SettingsError, match=r"^--session-rate: must be a finite number, got inf$") as e:
        numbers.check(math.inf, numbers.flag("--session-rate"), minimum=0, above=True)
    assert isinstance(e.value, numbers.NumberError) and e.value.exit_code == 2
    with pytest.raises(ManifestError, match=r"^m.yaml: field 'a.b': must be >= 1, got 0$"):
        numbers.check(0, numbers.manifest("m.yaml", "a.b"), integer=True, minimum=1)
    assert numbers.check(3.0, "x", integer=True, minimum=1) == 3
    with pytest.raises(numbers.NumberError, match="must be a whole number, got True"):
        numbers.check(True, "x", integer=True)


# ------------------------------------------------------------------------------------ replays: flags and traces

def replay(tmp: Path, trace_text: str, *flags: str, name: str = "trace.jsonl") -> subprocess.CompletedProcess:
    """``mlharness replay`` of a trace at a closed port: whatever is refused is refused before any connection."""
    trace = tmp / name
    trace.write_text(trace_text)
    return subprocess.run([sys.executable, "-m", "mlharness", "replay", "--endpoint", "http://127.0.0.1:9",
                           "--results-root", str(tmp / "results"), "--no-progress", *flags, str(trace)],
                          capture_output=True, text=True, timeout=120, cwd=tmp)


def agentic(turns: int, delay: float = 0.0) -> str:
    rows = []
    for k in range(1, 2 * turns + 1):
        row = {"conversation_id": "c1", "turn": k, "role": "user" if k % 2 else "assistant", "content": "hi"}
        if k == 3:
            row["delay_seconds"] = delay
        rows.append(json.dumps(row))
    return "\n".join(rows) + "\n"


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("flag", ["--session-rate", "--session-rate=0.5,inf"])
def test_an_infinite_session_rate_is_blamed_on_the_flag_given(tmp_path, flag):
    args = [flag, "inf"] if "=" not in flag else [flag]
    done = replay(tmp_path, agentic(2), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--session-rate: must be a finite number, got inf" in one_line(done.stderr)
    assert "--target-qps" not in done.stderr


def test_a_think_scale_out_of_range_is_refused_naming_the_flag(tmp_path):
    done = replay(tmp_path, agentic(2), "--think-scale", "nan")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--think-scale: must be a finite number, got nan" in one_line(done.stderr)


def test_a_delay_that_outlasts_the_limit_is_refused_naming_the_row(tmp_path):
    done = replay(tmp_path, agentic(2, delay=1e12), "--think-scale", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("trace.jsonl:3: field 'delay_seconds': must be <= 604800 s, got 1000000000000 (a week: a replay waits "
            "out its recorded times)") in one_line(done.stderr)


def test_think_times_scaled_past_the_limit_are_refused_before_loadgen(tmp_path):
    done = replay(tmp_path, agentic(2, delay=1000.0), "--think-scale", "1000")
    assert done.returncode == 2, done.stdout + done.stderr
    err = one_line(done.stderr)
    assert "trace.jsonl:1: field 'turns[1].think_s': session 'c1' would wait 1000000 s" in err
    assert "--think-scale 1000" in err and "within 604800 s" in err


def test_a_mooncake_timestamp_past_the_limit_is_refused_naming_the_row(tmp_path):
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 5},
            {"timestamp": 1e18, "input_length": 10, "output_length": 5}]
    done = replay(tmp_path, "\n".join(json.dumps(r) for r in rows) + "\n", "--timing", "recorded")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "trace.jsonl:2: field 'timestamp': 1e+18 ms after the trace's first timestamp" in \
        one_line(done.stderr)


def test_a_session_of_too_many_turns_is_refused_naming_the_row(tmp_path):
    done = replay(tmp_path, agentic(numbers.MAX_TURNS + 1))
    assert done.returncode == 2, done.stdout + done.stderr
    assert (f"trace.jsonl:1: session 'c1' has {numbers.MAX_TURNS + 1} turns; at most {numbers.MAX_TURNS} (turns per "
            "session: each resends the whole history)") in one_line(done.stderr)


# ------------------------------------------------------------------------------------- responses handed to LoadGen

@pytest.mark.parametrize(("dtype", "answer"), [
    (np.int32, [float("nan")]),  # a list: its NaN was cast to -2147483648 and scored
    (np.int32, float("inf")),
    (np.float32, [1.0, float("nan")]),
    (np.float64, np.array([float("-inf")])),
])
def test_a_non_finite_response_is_refused_naming_the_sample(dtype, answer):
    from tests.test_sut import make_pipeline

    p = make_pipeline(2, postprocess=lambda ctx, outputs, indices: [[0], answer], dtype=dtype)
    with pytest.raises(HookError, match=r"postprocess.*response of sample 9 holds \d non-finite values"):
        p.respond([np.zeros((2, 1))], 2, np.array([4, 9]))


# --------------------------------------------------------------------------------- one validator, three sources

def test_a_flag_a_manifest_key_and_a_trace_row_reach_the_same_validator(tmp_path, capsys):
    """The same class (NumberError) and the same wording after the place, whichever source the number came from."""
    errors = []
    with pytest.raises(numbers.NumberError) as e:
        from mlharness.measurement.replay import values

        values("inf", "--session-rate", float)
    errors.append(e.value)
    path = toy_with(tmp_path, timeout_s=float("inf"))
    from mlharness.kinds.registry import check_inputs  # a pipeline stage list: its kind checks it
    from mlharness.manifest.loader import load_manifest

    with pytest.raises(numbers.NumberError) as e:
        check_inputs(load_manifest(str(path)))
    errors.append(e.value)
    trace = tmp_path / "t.jsonl"
    trace.write_text(agentic(2, delay=1e12))
    from mlharness.kinds.sessions.traces import load_trace

    with pytest.raises(numbers.NumberError) as e:
        load_trace(trace)
    errors.append(e.value)
    assert [x.problem.split(" (")[0] for x in errors] == ["must be a finite number, got inf"] * 2 + [
        "must be <= 604800 s, got 1000000000000"]
    assert [str(x).split(": ")[0] for x in errors] == ["--session-rate", str(path), f"{trace}:3"]
    assert all(x.exit_code == 2 for x in errors)


# ------------------------------------------------------------------------------------------- model inputs, at load

@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_model_input_is_refused_naming_the_sample(bad):
    from mlharness.loadgen.qsl import check_preprocessed

    sample = np.zeros((3, 4), dtype=np.float32)
    sample[1, 2] = bad
    specs = [{"name": "pixels", "element_type": "float32", "shape": [3, 4]}]
    with pytest.raises(HookError, match=r"preprocess.*sample 7: input 0 \('pixels'\) holds 1 NaN or infinite "
                                        r"value\(s\) \(first at flat index 6\)"):
        check_preprocessed(sample, 7, 1, specs, "m.yaml")
    sample[1, 2] = 0.5  # the same sample, finite: taken as it is
    assert check_preprocessed(sample, 7, 1, specs, "m.yaml")[0] is sample
