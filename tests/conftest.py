"""Shared fixtures: an isolated cache for generated models and data, and the real CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the session: the demo model and images are generated once and reused."""
    return tmp_path_factory.mktemp("mlharness-cache")


@pytest.fixture
def cli_env(shared_cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["MLHARNESS_CACHE"] = str(shared_cache)
    env.pop("MLHARNESS_DEMO_DIR", None)
    return env


@pytest.fixture(scope="module")
def env(shared_cache: Path) -> dict[str, str]:
    """The environment of a module's CLI runs: the session's cache, no demo folder override."""
    e = dict(os.environ)
    e["MLHARNESS_CACHE"] = str(shared_cache)
    e.pop("MLHARNESS_DEMO_DIR", None)
    return e


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> Path:
    """The test's folder as the working directory of in-process CLI calls, with the session's cache and no demo
    folder override."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    monkeypatch.delenv("MLHARNESS_DEMO_DIR", raising=False)
    return tmp_path


@pytest.fixture
def run_cli(cli_env: dict[str, str]):
    """Run ``mlharness ARGS`` in a subprocess; returns the CompletedProcess (text)."""

    def _run(*args: str, timeout: float = 120, cwd: Path | None = None, env: dict | None = None):
        return subprocess.run(
            [sys.executable, "-m", "mlharness.cli", *args],
            capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env or cli_env,
        )

    return _run
