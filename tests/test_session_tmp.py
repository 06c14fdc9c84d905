"""The suite's temporary files stay in a folder of its own session (tests/conftest.py): the test process and
every process it starts read that TMPDIR, which is directly under the system's temporary folder (short enough for
Ray's socket paths) and is not where pytest keeps its tmp_path folders."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def test_temporary_files_go_to_the_sessions_own_folder(tmp_path):
    here = Path(tempfile.gettempdir())
    assert here.name.startswith("mlharness-tests-") and here.is_dir()
    assert here.parent == Path(os.environ["PYTEST_DEBUG_TEMPROOT"])
    assert not tmp_path.is_relative_to(here)  # pytest's folders outlive the session's TMPDIR
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, timeout=60)
    assert Path(child.stdout.strip()) == here
    with tempfile.NamedTemporaryFile() as f:
        assert Path(f.name).parent == here
