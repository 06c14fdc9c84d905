"""scripts/bench_rgat_memory.py runs (a smoke test on a 32 MiB graph, not the measurement): with 4 forked workers,
each having read every page of the memory-mapped features, no worker holds a private copy of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps_rollup").is_file(), reason="needs Linux smaps_rollup")

SCRIPT = Path(__file__).parents[1] / "scripts" / "bench_rgat_memory.py"


def test_forked_workers_share_the_mapped_features(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--mb", "32", "--samples", "2", "--dir", str(tmp_path),
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    one, four = r["processes_1"]["workers"], r["processes_4"]["workers"]
    assert len(one) == 1 and len(four) == 4
    # a copy would be anonymous memory of at least the tables' size in each worker beyond what it inherited
    assert all(w["anon"] - one[0]["anon"] < r["feature_mib"] / 2 for w in four), (four, one)
    # the lone worker maps the file alone (its USS holds it); four split it, each's USS far below the file
    assert all(w["uss"] < one[0]["uss"] for w in four)
    assert r["threads_4"]["process"]["anon"] - r["threads_1"]["process"]["anon"] < 3 * r["feature_mib"]
