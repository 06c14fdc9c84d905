"""VALID on the first try for the kinds of model users plug in: a PyTorch classifier with a transformers
architecture, a Keras CNN saved as ``.keras`` and as a SavedModel, and a PyTorch model with embedding tables
(``.pt2``), each in all four scenarios with ``--min-duration-ms 2000`` and nothing else, on a quiet host and while
another process keeps one core busy. The four runs of a model share one process (the CLI's ``main`` called
four times, as a user's shell would call it), so the framework is imported once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlharness.loadgen.logs import parse_summary
from tests.helpers import user_models
from tests.helpers.busy import busy_core

pytestmark = [pytest.mark.slow, pytest.mark.timing]  # VALID on a quiet host and with one core busy

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
# each scenario once, in one process: exit status per scenario as the last line
DRIVER = """\
import json, sys
from mlharness.cli import main
manifest, out = sys.argv[1], sys.argv[2]
codes = {}
for scenario in sys.argv[3:]:
    codes[scenario] = main(["run", "--manifest", manifest, "--scenario", scenario, "--mode", "performance",
                            "--min-duration-ms", "2000", "--no-progress", "--output", f"{out}/{scenario}"])
print(json.dumps(codes))
"""

BUILDERS = {
    "bert-torchscript": user_models.write_bert,
    "recommender-pt2": user_models.write_recommender,
    "keras-cnn-keras": lambda folder: user_models.write_keras(folder, "keras"),
    "keras-cnn-savedmodel": lambda folder: user_models.write_keras(folder, "savedmodel"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("user_models")
    return {kind: build(folder) for kind, build in BUILDERS.items()}


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "one-core-busy"])
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_valid_in_every_scenario_on_the_first_try(models, tmp_path, kind, busy):
    env = dict(os.environ, MLHARNESS_CACHE=str(tmp_path / "cache"))
    with busy_core(busy):
        proc = subprocess.run([sys.executable, "-c", DRIVER, str(models[kind]), str(tmp_path / "runs"), *SCENARIOS],
                              capture_output=True, text=True, timeout=280, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert codes == dict.fromkeys(SCENARIOS, 0), proc.stderr[-4000:]
    invalid = [s for s in SCENARIOS if not parse_summary(tmp_path / "runs" / s / "mlperf_log_summary.txt", s).valid]
    said = [line for line in proc.stderr.splitlines() if line.startswith(("calibrated", "INVALID", "Server latency"))]
    summaries = {s: (tmp_path / "runs" / s / "mlperf_log_summary.txt").read_text()[:2500] for s in invalid}
    assert not invalid, "\n".join([*said, *(f"--- {s}\n{text}" for s, text in summaries.items())])
    # a Server run of a model that is no MLPerf benchmark says which latency bound it is held to, and why
    assert "Server latency bound: p99 latency <= " in proc.stderr
    assert "not an MLPerf benchmark" in proc.stderr
