"""bfcl-eval's environment for BFCL v4 scoring: where its Python is looked for (the option, MLHARNESS_BFCL_PYTHON,
then the cache's environment ``mlharness accuracy bfcl-v4 --setup`` makes), the check a run makes before its model
loads (an accuracy run without a working environment is refused before any sample is played, nothing left behind),
and the commands ``--setup`` runs (not run here: they download)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from mlharness.errors import AccuracyError
from mlharness.tasks import METRICS
from mlharness.tasks.bfcl_v4 import env as bfcl_env
from tests.helpers.cli import cli

CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"


@pytest.fixture
def no_bfcl(monkeypatch, tmp_path):
    """An empty cache and no MLHARNESS_BFCL_PYTHON."""
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(bfcl_env.PYTHON_ENV, raising=False)
    bfcl_env.check_python.cache_clear()
    yield tmp_path
    bfcl_env.check_python.cache_clear()


def _fake_python(path: Path, version: str) -> Path:
    """An executable that answers the check's probe with ``version``, as a Python with that bfcl-eval would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


def test_the_python_is_the_option_then_the_variable_then_the_cache_environment(no_bfcl, monkeypatch):
    from mlharness.tasks.bfcl_v4.dataset import bfcl_python

    assert bfcl_env.find_python() is None and bfcl_python() is None
    cached = _fake_python(bfcl_env.venv_python(bfcl_env.default_venv()), bfcl_env.BFCL_EVAL_VERSION)
    assert bfcl_env.default_venv() == no_bfcl / "cache" / f"bfcl-eval-{bfcl_env.BFCL_EVAL_VERSION}"
    assert bfcl_env.find_python() == str(cached) == bfcl_python()
    monkeypatch.setenv(bfcl_env.PYTHON_ENV, "/opt/bfcl/bin/python")
    assert bfcl_env.find_python() == "/opt/bfcl/bin/python" == bfcl_python()
    assert bfcl_env.find_python("/elsewhere/python") == "/elsewhere/python"
    monkeypatch.delenv(bfcl_env.PYTHON_ENV)
    bfcl_env.check_python.cache_clear()
    assert bfcl_env.require_python(None, "bfcl_v4") == str(cached)  # the cache's environment passes the check


def test_the_metric_preflight_names_what_is_missing_and_how_to_fix_it(no_bfcl, monkeypatch):
    metric = METRICS.get("bfcl_v4")()
    with pytest.raises(AccuracyError, match=r"^bfcl_v4: .*MLHARNESS_BFCL_PYTHON is not set and .*bfcl-eval-"
                                            r".* does not exist; run 'mlharness accuracy bfcl-v4 --setup'"):
        metric.preflight({})
    # a Python without bfcl-eval (this one), named by the variable
    monkeypatch.setenv(bfcl_env.PYTHON_ENV, sys.executable)
    with pytest.raises(AccuracyError, match=r"cannot import bfcl-eval's AST checker: ModuleNotFoundError.*named by "
                                            r"MLHARNESS_BFCL_PYTHON"):
        metric.preflight({})
    # another bfcl-eval than the pinned one, named by the option
    old = _fake_python(no_bfcl / "old" / "python", "2025.1.1")
    with pytest.raises(AccuracyError, match=r"has bfcl-eval 2025\.1\.1, not the pinned 2026\.3\.23 .*option "
                                            r"bfcl_python"):
        metric.preflight({"bfcl_python": str(old)})
    # the answer is kept for the process: a second check does not run the Python again
    good = _fake_python(no_bfcl / "good" / "python", bfcl_env.BFCL_EVAL_VERSION)
    metric.preflight({"bfcl_python": str(good)})
    good.unlink()
    metric.preflight({"bfcl_python": str(good)})
    assert METRICS.get("squad_v1.1")().preflight({}) is None  # other metrics need nothing more


def test_an_accuracy_run_without_bfcl_eval_is_refused_before_any_sample(env, tmp_path):
    pytest.importorskip("mlperf_loadgen")
    bare = {k: v for k, v in env.items() if k != bfcl_env.PYTHON_ENV}
    if Path(bare["MLHARNESS_CACHE"], f"bfcl-eval-{bfcl_env.BFCL_EVAL_VERSION}").exists():
        pytest.skip("the test cache holds a bfcl-eval environment")
    out = tmp_path / "acc"
    start = time.monotonic()
    proc = cli(bare, "run", "--manifest", "qwen3.6-27b-oracle", "--scenario", "SingleStream", "--mode", "accuracy",
               "--output", str(out), timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = re.sub(r"\s+", " ", proc.stdout + proc.stderr)
    assert "bfcl_v4: scoring needs bfcl-eval's AST checker" in text and "mlharness accuracy bfcl-v4 --setup" in text
    assert not out.exists() and not list(tmp_path.glob("acc*"))  # no run folder, no .failed-* folder
    assert elapsed < 60, elapsed


def test_setup_makes_the_pinned_environment_of_ci_run(tmp_path):
    venv = tmp_path / "venv"
    make, bfcl, deps = bfcl_env.setup_commands(venv, "/usr/bin/python3")
    assert make == ["/usr/bin/python3", "-m", "venv", str(venv)]
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    assert bfcl == [*pip, "--no-deps", "bfcl-eval==2026.3.23"]
    assert deps[:len(pip)] == pip and "numpy==1.26.4" in deps and "filelock==3.20.0" in deps
    # .ci/run's .ci-bfcl block installs the same pins (one list, kept equal here)
    block = CI_RUN.read_text().split("side_env bfcl ", 1)[1].split('>"$logs/bfcl"', 1)[0]
    installs = [re.findall(r'"([^"]+)"|(\S+)', part) for part in block.split("$V/bin/pip install -q")[1:]]
    named = [[(a or b).rstrip("')") for a, b in words if (a or b) not in ("&&", "\\")] for words in installs]
    assert named[0] == ["--no-deps", bfcl_env.BFCL_EVAL]
    assert named[1] == list(bfcl_env.DEPENDENCIES)
