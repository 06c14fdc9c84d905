"""The real CLI in a subprocess, for end-to-end tests that keep one environment per module (the ``env`` fixture)."""

from __future__ import annotations

import subprocess
import sys


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``mlharness ARGS`` with ``env``; returns the CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
