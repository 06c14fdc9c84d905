"""scripts/trace_options.py: the layer ranks agree across the two layouts, the figures count what its docstring
says, and the tracer records calls that carry the options (or a replaced copy), in other threads too."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import threading
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "trace_options.py"


@pytest.fixture(scope="module")
def tracer():
    spec = importlib.util.spec_from_file_location("trace_options", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


@pytest.mark.parametrize(("old", "new", "rank"), [
    ("mlharness.loadgen.runner", "mlharness.run.runner", 6),
    ("mlharness.loadgen.interrupt", "mlharness.run.interrupt", 6),
    ("mlharness.loadgen.calibrate", "mlharness.calibration.calibrate", 5),
    ("mlharness.loadgen.server_probe", "mlharness.calibration.server_probe", 5),
    ("mlharness.loadgen.settings", "mlharness.loadgen.settings", 4),
    ("mlharness.predictors.openai_sse", "mlharness.predictors.openai.sse", 3),
])
def test_both_layouts_rank_alike(tracer, old, new, rank):
    assert tracer.layer(old) == tracer.layer(new) == rank


def test_layers_of_the_rest(tracer):
    layer = tracer.layer
    assert [layer(m) for m in ("mlharness.cli", "mlharness.tasks.imagenet.cli", "mlharness.measurement.tune",
                               "mlharness.report.html", "mlharness.submission.package", "mlharness.agent.client",
                               "mlharness.manifest.hooks", "mlharness.tasks.base", "mlharness.fileguard",
                               "mlharness")] == [9, 9, 9, 8, 7, 3, 2, 1, 0, 0]
    assert layer("dataclasses") is None and layer("__main__") is None


def test_figures_over_a_chain(tracer):
    S = tracer.Step
    steps = [
        S("mlharness.loadgen.runner", None, "run", "main"),
        S("mlharness.loadgen.plan", "mlharness.loadgen.runner", "plan_run", "main"),
        S("mlharness.loadgen.bounds", "mlharness.loadgen.plan", "check", "main"),
        S("mlharness.loadgen.plan", "mlharness.loadgen.bounds", "again", "main"),  # climbs 4 -> 6, and back
        S("mlharness.loadgen.plan", "mlharness.loadgen.plan", "inner", "main"),  # same module: neither
        S("dataclasses", "mlharness.loadgen.factory", "replace", "main"),  # outside mlharness: neither
        S("mlharness.manifest.hooks", "mlharness.tasks.base", "call", "w"),  # climbs 1 -> 2, first entry
        S("mlharness.loadgen.runner", "mlharness.loadgen.calibrate", "back", "w"),  # climbs 5 -> 6, and back
        S("mlharness.loadgen.calibrate", "mlharness.loadgen.runner", "down", "w"),  # down, first entry
    ]
    fig = tracer.count(steps)
    assert fig.steps == 9
    assert fig.modules == ["mlharness.loadgen.runner", "mlharness.loadgen.plan", "mlharness.loadgen.bounds",
                           "mlharness.manifest.hooks", "mlharness.loadgen.calibrate"]
    assert [s.function for s in fig.climbs] == ["again", "call", "back"]
    assert [s.function for s in fig.back_edges] == ["again", "back"]
    assert fig.climbs_back == 2


@dataclasses.dataclass
class _Options:
    count: int = 1


def _takes(opts, other=None):
    return opts


def _takes_keyword(*, given):
    return given


def _holds_elsewhere(n):
    return n


def test_tracer_records_the_options_and_their_copies_in_threads(tracer):
    opts = _Options()
    before = sys.getprofile(), threading.getprofile()
    with tracer.Tracer(opts, limit=10) as t:
        _takes(opts)
        _takes_keyword(given=dataclasses.replace(opts, count=2))  # replace itself and the copy's __init__
        _holds_elsewhere(opts.count)  # a field, not the options: no step
        worker = threading.Thread(target=_takes, args=(1, opts), name="worker")
        worker.start()
        worker.join(timeout=10)
    functions = [(s.function, s.thread) for s in t.steps]
    assert ("_takes", "MainThread") in functions and ("_takes", "worker") in functions
    assert ("_takes_keyword", "MainThread") in functions
    assert ("replace", "MainThread") in functions
    assert all(f != "_holds_elsewhere" for f, _ in functions)
    assert (sys.getprofile(), threading.getprofile()) == before  # whatever profiled before is back


def test_tracer_keeps_only_the_limit(tracer):
    opts = _Options()
    with tracer.Tracer(opts, limit=3) as t:
        for _ in range(10):
            _takes(opts)
    assert len(t.steps) == 3
