"""Commands that write where the user keeps files never replace one without --force.

``tune`` runs in-process with its trial runs replaced by fixed verdicts (a unit test of the writing around them;
the real trials are covered in test_tune.py); the other commands run through the real CLI and must refuse before
doing any work.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlharness import cli
from mlharness.measurement.tune import Tuner

USER_CONF = "# mine, tuned by hand\ndemo.Offline.target_qps = 123\n"


@pytest.fixture
def fake_trials(monkeypatch):
    """Every trial run is VALID at 100 samples/s: the Offline search writes target_qps = 125.00."""

    def fake_run(self, what, scenario, user_conf=None, **kw):
        return SimpleNamespace(summary=SimpleNamespace(valid=True, metric_value=100.0, fields={}))

    monkeypatch.setattr(Tuner, "_run", fake_run)


def test_tune_keeps_an_existing_user_conf_and_shows_the_diff(tmp_path, monkeypatch, capsys, fake_trials):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user.conf").write_text(USER_CONF)
    assert cli.main(["tune", "--scenario", "Offline"]) == 0
    captured = capsys.readouterr()
    assert (tmp_path / "user.conf").read_text() == USER_CONF  # untouched
    new = (tmp_path / "user.conf.new").read_text()
    assert "demo.Offline.target_qps = 125.00" in new
    assert "-demo.Offline.target_qps = 123" in captured.out and "+demo.Offline.target_qps = 125.00" in captured.out
    assert "--- user.conf (existing)" in captured.out and "--force replaces it" in captured.out
    assert "user.conf exists" in captured.err  # said up front, before the trials

    # with --force: replaced, and the diff shown
    (tmp_path / "user.conf.new").unlink()
    assert cli.main(["tune", "--scenario", "Offline", "--force"]) == 0
    captured = capsys.readouterr()
    assert (tmp_path / "user.conf").read_text() == new and not (tmp_path / "user.conf.new").exists()
    assert "-demo.Offline.target_qps = 123" in captured.out and "+demo.Offline.target_qps = 125.00" in captured.out


def test_tune_writes_a_new_user_conf_without_a_diff(tmp_path, monkeypatch, capsys, fake_trials):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["tune", "--scenario", "Offline"]) == 0
    assert "demo.Offline.target_qps = 125.00" in (tmp_path / "user.conf").read_text()
    assert "(existing)" not in capsys.readouterr().out


# command line (with {out} for the existing path) -> whether the path is a folder
REFUSERS = {
    "report-md": (["report", "{results}", "--md", "{out}"], False),
    "report-html": (["report", "{results}", "--html", "{out}"], False),
    "sysinfo": (["sysinfo", "--out", "{out}"], False),
    "accuracy-squad": (["accuracy", "squad", "--log", "{log}", "--val-data", "{log}", "--vocab", "{log}",
                        "--out-file", "{out}"], False),
    "accuracy-kits19": (["accuracy", "kits19", "--log", "{log}", "--preprocessed-dir", "{results}",
                         "--output-dir", "{out}"], True),
    "synth-imagenet": (["dataset", "synth", "imagenet", "--out", "{out}", "--count", "2"], True),
    "synth-squad": (["dataset", "synth", "squad", "--out", "{out}", "--count", "2"], True),
    "synth-kits19": (["dataset", "synth", "kits19", "--out", "{out}", "--count", "1"], True),
    "prepare-kits19": (["dataset", "prepare", "kits19", "--raw", "{results}", "--out", "{out}"], True),
}


@pytest.mark.parametrize("case", sorted(REFUSERS))
def test_commands_refuse_to_overwrite_user_files(run_cli, tmp_path, case):
    argv, folder = REFUSERS[case]
    out = tmp_path / "mine"
    if folder:
        out.mkdir()
        owned = out / ("kits19_dice.csv" if case == "accuracy-kits19" else "notes.txt")
    else:
        owned = out
    owned.write_text("the user's own file\n")
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[]")
    args = [a.format(out=out, results=tmp_path / "results", log=log) for a in argv]
    proc = run_cli(*args, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "--force" in proc.stderr and str(out) in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert owned.read_text() == "the user's own file\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        ["mine", "mlperf_log_accuracy.json", *(["kits19_dice.csv" if case == "accuracy-kits19" else "notes.txt"]
                                               if folder else [])])


def test_sysinfo_force_replaces_and_an_empty_folder_is_free(run_cli, tmp_path):
    out = tmp_path / "system.json"
    out.write_text("{}\n")
    proc = run_cli("sysinfo", "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    assert "host_processor_model_name" in json.loads(out.read_text())
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_cli("dataset", "synth", "squad", "--out", str(empty), "--count", "2")
    assert proc.returncode == 0, proc.stderr
    assert (empty / "dev-v1.1.json").is_file()


def test_write_text_diff_and_refusal(tmp_path):
    from mlharness.userfiles import OutputExists, write_text

    path = tmp_path / "a.conf"
    shown: list[str] = []
    write_text(path, "x = 1\n", force=False, show=shown.append)
    assert path.read_text() == "x = 1\n" and shown == []
    with pytest.raises(OutputExists, match="--force"):
        write_text(path, "x = 2\n", force=False, show=shown.append)
    assert path.read_text() == "x = 1\n" and "-x = 1\n+x = 2" in shown[-1]
    write_text(path, "x = 2\n", force=True, show=shown.append)
    assert path.read_text() == "x = 2\n" and "+x = 2" in shown[-1]
    assert Path(tmp_path).glob(".a.conf.*") is not None and not list(tmp_path.glob(".a.conf.*"))


def test_written_files_get_a_normal_mode(tmp_path):
    """A user's output file gets a new file's mode (0666 less the umask), not the atomic write's private 0600;
    a replaced file keeps its own mode."""
    import os

    from mlharness.userfiles import write_text

    mask = os.umask(0o027)
    try:
        write_text(tmp_path / "new.conf", "x = 1\n", force=False)
        assert (tmp_path / "new.conf").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(mask)
    kept = tmp_path / "kept.conf"
    kept.write_text("x = 1\n")
    kept.chmod(0o604)
    write_text(kept, "x = 2\n", force=True)
    assert kept.stat().st_mode & 0o777 == 0o604 and kept.read_text() == "x = 2\n"
