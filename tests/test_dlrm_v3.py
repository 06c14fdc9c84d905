"""dlrm-v3: jagged stream checks, NE/ACC/gAUC against the official accuracy.py output, the oracle's maximum, and
TEST08 verdicts against the official run_verification.py output (fixtures: tests/fixtures/dlrm_v3/README.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

FIX = Path(__file__).parent / "fixtures" / "dlrm_v3"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_accuracy_line_is_the_official_scripts_on_a_random_model_log(tmp_path):
    from mlharness.tasks.dlrm_v3.metric import accuracy_text

    text, figures = accuracy_text(FIX / "random_accuracy.json")
    assert text == (FIX / "random_accuracy.official.txt").read_text()
    assert 0.3 < figures["metric/lifetime_accuracy/rating"] < 0.8  # not an oracle: the comparison means something


def test_oracle_scores_the_maximum():
    from mlharness.tasks.dlrm_v3.metric import accuracy_text

    _, f = accuracy_text(FIX / "oracle_accuracy.json")
    assert f["metric/lifetime_accuracy/rating"] == 1.0
    assert f["metric/lifetime_gauc/rating"] == pytest.approx(1.0, abs=1e-9)
    assert f["metric/lifetime_ne/rating"] < 1e-9


@pytest.mark.parametrize("log", ["oracle", "reordered", "altered"])
def test_test08_verdicts_and_output_are_the_official_scripts(log):
    from mlharness.tasks.dlrm_v3.test08 import verify

    ok, text = verify(FIX / "oracle_accuracy.json", FIX / f"{log}_perf.json")
    official = (FIX / f"test08_{log}.official.txt").read_text()
    assert ok == ("rc=0" in official) == (log == "oracle")
    body = official.split("Verifying accuracy. This might take a while...\n", 1)[1].split("TEST08 verification")[0]
    assert text == body


def test_cli_synth_then_bad_jagged_input_is_refused_with_exit_2(tmp_path):
    r = _cli("dataset", "synth", "dlrm-v3", "--out", str(tmp_path / "d"), "--timestamps", "2",
             "--queries-per-ts", "3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    from mlharness.tasks.dlrm_v3.jagged import open_stream

    # the reference's layout as synth writes it, then its arrays broken in mlharness's stream.npz, which states
    # the offsets outright
    good = {k: v.copy() for k, v in open_stream(tmp_path / "d").arrays.items()}
    assert len(good["ts_idx"]) == 6

    def broken(name, change):
        a = {k: v.copy() for k, v in good.items()}
        change(a)
        p = tmp_path / name / "stream.npz"
        p.parent.mkdir()
        np.savez(p, **a)
        return p

    def swap_offsets(a):
        a["uih_offsets"][3], a["uih_offsets"][4] = a["uih_offsets"][4], a["uih_offsets"][3] + 0
    cases = {
        "offsets": (swap_offsets, "sample 3, field 'uih_offsets'"),
        "range": (lambda a: a["cand_offsets"].__setitem__(-1, 10_000), "field 'cand_offsets'"),
        "history": (lambda a: a["uih_timestamps"].__setitem__(slice(a["uih_offsets"][2], a["uih_offsets"][3]),
                                                             a["uih_timestamps"][a["uih_offsets"][2]:a["uih_offsets"][3]][::-1] + 0),
                    "sample 2, field 'uih_timestamps'"),
        "stream": (lambda a: a["ts_idx"].__setitem__(4, 0), "sample 4, field 'ts_idx'"),
    }
    from mlharness.errors import DatasetError

    for name, (change, where) in cases.items():
        p = broken(name, change)
        with pytest.raises(DatasetError) as e:
            open_stream(p.parent)
        assert e.value.exit_code == 2 and str(p) in str(e.value) and where in str(e.value), (name, str(e.value))
    r = _cli("accuracy", "dlrm-v3-test08", "-r", str(FIX / "oracle_accuracy.json"), "-t",
             str(FIX / "altered_perf.json"), cwd=tmp_path)
    assert r.returncode == 1 and "TEST FAIL" in r.stdout
