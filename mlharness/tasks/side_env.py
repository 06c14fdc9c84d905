"""A pinned package in a virtual environment of its own, for the scorers whose pins clash with mlharness's own
(vbench for wan-2.2, bfcl-eval for BFCL v4): where its Python is, whether it imports the pinned version, and how
``mlharness accuracy <benchmark> --setup`` makes one in mlharness's cache.

Such a scorer runs as a subprocess of that Python. Its Python is, in this order: the metric option
(:attr:`SideEnv.option`), the environment variable (:attr:`SideEnv.env_var`), then the environment ``--setup``
makes in mlharness's cache (``<cache>/<SideEnv.venv_name>/``). A run checks that Python before its model loads
(:meth:`SideEnv.check_python`, once per process), so a missing environment costs seconds, not a run's hours.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import AccuracyError


def run_captured(command: list[str], timeout_s: float, *, timed_out: str, cannot_run: str,
                 **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` of a side environment's Python with its text output captured and a timeout; an
    AccuracyError saying ``timed_out`` when it runs past it, ``cannot_run: <why>`` when it cannot start. The exit
    status is the caller's to judge (each names its own tail of the output)."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, **kwargs)
    except subprocess.TimeoutExpired as e:
        raise AccuracyError(timed_out) from e
    except OSError as e:
        raise AccuracyError(f"{cannot_run}: {e}") from e


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@dataclass(frozen=True)
class SideEnv:
    """One pinned package's environment. ``probe`` is the code its Python runs to import what the scorer imports
    and print the package's version; ``installs`` are the pip argument lists ``--setup`` runs in order after
    making the virtual environment; ``scratch_env`` names a variable pointed at the probe's temporary folder
    (for a package that writes files where it is imported); ``what`` is what the probe imports, in words;
    ``needs`` how messages say what scoring needs; ``owner`` the task the setup's errors are named by."""

    package: str  # its distribution name, as importlib.metadata.version reads it
    version: str
    env_var: str
    option: str
    venv_name: str
    probe: str
    installs: tuple[tuple[str, ...], ...]
    what: str
    needs: str
    how_to_fix: str
    owner: str
    check_timeout_s: float
    setup_timeout_s: float = 3600.0
    pinned_note: str = ""  # said after "not the pinned <version>"
    scratch_env: str | None = None

    def default_venv(self) -> Path:
        """The environment ``--setup`` makes: ``<mlharness cache>/<venv_name>``."""
        from mlharness.manifest.assets import cache_dir

        return cache_dir() / self.venv_name

    def find_python(self, explicit: str | None = None) -> str | None:
        """The package's Python: ``explicit`` (an option), else the environment variable, else the cache's
        environment where it exists; None when there is none."""
        if explicit:
            return str(explicit)
        value = os.environ.get(self.env_var, "").strip()
        if value:
            return value
        cached = venv_python(self.default_venv())
        return str(cached) if cached.is_file() else None

    def where_from(self, explicit: str | None = None) -> str:
        """Which of the three ways named the Python :meth:`find_python` returns (for messages)."""
        if explicit:
            return f"the option {self.option}"
        if os.environ.get(self.env_var, "").strip():
            return self.env_var
        return f"the environment in mlharness's cache ({self.default_venv()})"

    def check_python(self, python: str) -> str:
        """The package's version as ``python`` imports it; AccuracyError naming what is wrong when it cannot, or
        when it is not the pinned version. Cached per process: the import takes seconds."""
        return _check_python(self, python)

    def require_python(self, explicit: str | None, who: str) -> str:
        """The Python that will score, checked now; AccuracyError saying what is missing and how to fix it."""
        python = self.find_python(explicit)
        if python is None:
            raise AccuracyError(f"{who}: {self.needs}, and no environment has it: {self.env_var} is not set and "
                                f"{self.default_venv()} does not exist; {self.how_to_fix}")
        try:
            self.check_python(python)
        except AccuracyError as e:
            raise AccuracyError(f"{who}: {self.needs}: {e} (named by {self.where_from(explicit)}); "
                                f"{self.how_to_fix}") from e
        return python

    def setup_commands(self, venv: Path, base_python: str = sys.executable) -> list[list[str]]:
        """The commands that make ``venv``: a virtual environment, then each of :attr:`installs`."""
        pip = [str(venv_python(venv)), "-m", "pip", "install", "-q"]
        return [[base_python, "-m", "venv", str(venv)], *([*pip, *args] for args in self.installs)]

    def setup(self, venv: Path | None = None, say=print) -> Path:  # noqa: ANN001 - a print-like callable
        """Make the environment (downloads from PyPI; minutes) and check it; returns its Python."""
        venv = Path(venv) if venv is not None else self.default_venv()
        for command in self.setup_commands(venv):
            say("$ " + " ".join(command))
            try:
                subprocess.run(command, check=True, timeout=self.setup_timeout_s)
            except (OSError, subprocess.SubprocessError) as e:
                raise AccuracyError(f"{self.owner}: making {self.package}'s environment in {venv} failed: {e}") from e
        python = venv_python(venv)
        _check_python.cache_clear()
        self.check_python(str(python))
        return python


@functools.lru_cache(maxsize=16)
def _check_python(side: SideEnv, python: str) -> str:
    if os.sep in python:  # the probe runs in a temporary folder: a relative path would name nothing there
        python = os.path.abspath(python)
    with tempfile.TemporaryDirectory(prefix=f"mlharness-{side.package}-check-") as tmp:
        env = {**os.environ, side.scratch_env: tmp} if side.scratch_env else None
        done = run_captured([python, "-I", "-c", side.probe], side.check_timeout_s, cwd=tmp, env=env,
                            timed_out=f"{python} did not import {side.what} in {side.check_timeout_s:g} s",
                            cannot_run=f"{python} cannot be run")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise AccuracyError(f"{python} cannot import {side.what}: {tail[0]}")
    version = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if version != side.version:
        raise AccuracyError(f"{python} has {side.package} {version or '(unknown version)'}, not the pinned "
                            f"{side.version}{side.pinned_note}")
    return version


# the callers' cache_clear(): a new environment, or a test's fake one, is checked again
SideEnv.check_python.cache_clear = _check_python.cache_clear  # type: ignore[attr-defined]
