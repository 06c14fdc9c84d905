"""Shared fixtures: an isolated cache for generated models and data, and the real CLI in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist each of N workers, and every process it starts, gets its share of the usable cores for
    OpenBLAS, numpy's and scipy's BLAS (at least 1), unless the environment already says: N processes each
    spinning up as many BLAS threads as there are cores spend the CPU in waiting for one another (scipy's sqrtm of
    FID's 2048x2048 covariances took twice the CPU time on two busy cores). torch's thread count is left alone:
    it reads OMP_NUM_THREADS and MKL_NUM_THREADS, and the float32 Inception features that FID is computed from
    change in their last bits with it (the official figures kept as fixtures were taken at the default). Runs
    before any test module imports numpy, which reads the variable once; a run without workers keeps the
    default."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers < 2:
        return
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // workers)))


_share_the_cores_between_workers()

TMP_PREFIX = "mlharness-tests-"
_session_tmp: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """The temporary files of the session and of every process it starts (vLLM's ZMQ sockets, Ray's session
    folders, TensorFlow's and PyTorch Geometric's generated modules, mlharness's own job folders) go into a folder
    of this session's, TMPDIR, removed when it ends: the tests leave nothing in the system's /tmp. pytest's own
    tmp_path folders stay where they are (PYTEST_DEBUG_TEMPROOT), kept for a look after a failure. Each process
    of the session (xdist's controller and workers) has a folder of its own directly under the system's temporary
    folder: Ray's socket paths under it must stay within the 107 bytes of a Unix socket's name."""
    root = os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    folder = tempfile.mkdtemp(prefix=TMP_PREFIX, dir=root)
    _session_tmp.append(folder)
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _session_tmp:
        shutil.rmtree(folder, ignore_errors=True)


SLOW_TIMEOUT_S = 300  # a test marked slow without a timeout of its own; the rest get pyproject's 120 s


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``slow`` or ``timing`` that names no timeout of its own gets :data:`SLOW_TIMEOUT_S`.

    Under pytest-xdist (``--dist loadfile`` hands out whole files in the order collected), the files holding a
    test marked ``slow`` go first, each keeping its own order: the long files start while the short ones remain to
    fill in, instead of one worker finishing a long file alone at the end. The order is the same in every
    worker, as xdist requires; a run without workers keeps pytest's order."""
    for item in items:
        if (item.get_closest_marker("slow") or item.get_closest_marker("timing")) and not item.get_closest_marker(
                "timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    long_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in long_files)


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
