"""One validator of numbers (mlharness/numbers.py): every duration, rate, delay, timestamp, timeout, count and
worker number from a flag, a manifest key or a trace row is finite, of its kind and in a stated range, refused
(exit 2) naming where it came from. Each case below was accepted (or crashed) before."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from mlharness import numbers
from mlharness.cli import main
from mlharness.errors import ManifestError, SettingsError

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
