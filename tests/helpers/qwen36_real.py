"""qwen3.6-27b through the commands a submitter takes: ``mlharness submission run`` (its accuracy run over the
synthetic BFCL v4 entries, scored by bfcl-eval, and its SingleStream performance run over the synthetic agentic
sessions) then ``mlharness submission package``; nothing is written by hand.

Run as a script (MLHARNESS_BFCL_PYTHON and MLHARNESS_INFERENCE_REPO set), it writes the committed fixture
tests/fixtures/qwen36_submission_run/<case>/: the package and the official checker's output on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers.cli import cli

SYSTEM, BENCH, SCEN = "edgebox", "qwen3.6-27b", "SingleStream"
# a development run: one pass over the sessions (the round's settings), not 600 s of them; LoadGen sizes a
# SingleStream permutation run at twice min_duration over the expected latency, so even 1 ms of the oracle's
# microsecond answers would be several passes
MIN_DURATION_MS = 0
# case -> (manifest, extra flags): the oracle answers every turn as recorded (mAP 100); the tiny random Qwen3.6
# answers noise (a low score)
CASES = {"oracle": ("qwen3.6-27b-oracle", ()), "random": ("qwen3.6-27b-random", ())}
# the system fields no probe finds on this host
OVERRIDES = {"status": "available", "system_type": "edge", "cooling": "air"}


def run_and_package(env: dict[str, str], work: Path, case: str, out: Path | None = None
                    ) -> tuple[subprocess.CompletedProcess, Path]:
    """``submission run`` of the case's manifest into ``work``/results, packaged into ``out`` (default
    ``work``/package); returns the run's process and the package root."""
    manifest, extra = CASES[case]
    work.mkdir(parents=True, exist_ok=True)
    overrides = work / "system.yaml"
    overrides.write_text(yaml.safe_dump(OVERRIDES))
    results, out = work / "results", out or work / "package"
    proc = cli(env, "submission", "run", "--manifest", manifest, "--scenarios", SCEN, "--division", "closed",
               "--submitter", "Acme", "--system-name", SYSTEM, "--results", str(results), "--system-overrides",
               str(overrides), "--min-duration-ms", str(MIN_DURATION_MS), *extra, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    packed = cli(env, "submission", "package", "--results", str(results), "--out", str(out), "--archive",
                 str(work / "archive"), timeout=120)
    assert packed.returncode == 0, packed.stdout[-3000:] + packed.stderr[-3000:]
    return proc, out


def official_output(tool: Path, root: Path, csv: Path) -> str:
    """The official v6.1 checker's output on the package ``root``, its path written as <package>."""
    proc = subprocess.run([sys.executable, "-m", "submission_checker.main", "--input", str(root), "--version",
                           "v6.1", "--csv", str(csv)], capture_output=True, text=True, timeout=120, cwd=tool)
    return (proc.stdout + proc.stderr).replace(str(root), "<package>")


if __name__ == "__main__":  # the committed fixture
    import os
    import shutil
    import tempfile

    tool = Path(os.environ["MLHARNESS_INFERENCE_REPO"]) / "tools" / "submission"
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "qwen36_submission_run"
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        for name in sys.argv[1:] or sorted(CASES):
            shutil.rmtree(fixture / name, ignore_errors=True)
            _, pkg = run_and_package(env, Path(tmp) / name, name, fixture / name / "package")
            text = official_output(tool, pkg, Path(tmp) / "summary.csv")
            (fixture / name / "official_checker_output.txt").write_text(text)
