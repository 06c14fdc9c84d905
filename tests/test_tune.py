"""`mlharness tune` writes a user.conf that LoadGen accepts and with which a short run is VALID; an unconfirmed
conf never replaces the user's file."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlharness.loadgen.settings import validate_user_conf
from mlharness.measurement.tune import TuneConfig, Tuner


@pytest.mark.slow
@pytest.mark.parametrize("scenario,key", [("Offline", "target_qps"), ("SingleStream", "target_latency"),
                                          ("MultiStream", "target_latency"), ("Server", "target_qps")])
def test_tune_writes_a_conf_that_makes_a_valid_run(run_cli, cli_env, tmp_path, scenario, key):
    conf = tmp_path / "user.conf"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = run_cli("tune", "--scenario", scenario, "--seconds", "0.6", "--count", "64", "--output", str(conf),
                   timeout=240, env={**cli_env, "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _tune_leftovers(tmp) == []  # the trials' folders went with the search
    assert "confirmation run: VALID" in proc.stdout
    lines = validate_user_conf(conf, "demo")  # LoadGen-valid keys for this model only
    assert [(m, s, k) for _, m, s, k, _ in lines] == [("demo", scenario, key)]
    value = float(lines[0][4])
    assert value > 0
    assert not (tmp_path / "user.conf.unconfirmed").exists()
    if scenario == "Server":
        # the search went below the Offline rate and the written rate is below its best VALID trial
        assert "Server at" in proc.stdout and "INVALID" in proc.stdout
        return  # a rerun at the edge of VALID is as noisy as the machine; the confirmation above is the proof
    # an independent run with that user.conf (and only a shorter duration) is VALID too
    out = tmp_path / "confirm"
    proc = run_cli("run", "--scenario", scenario, "--mode", "performance", "--user-conf", str(conf),
                   "--min-duration-ms", "400", "--min-query-count", "64", "--count", "64", "--output", str(out),
                   "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "Result is : VALID" in (out / "mlperf_log_summary.txt").read_text()


def _fake_tuner(tmp_path, scenario, verdicts):
    """A Tuner whose trial runs are replaced by a list of VALID/INVALID verdicts (a unit test of the confirm
    logic around them; the real runs are covered above)."""
    tuner = Tuner(TuneConfig(manifest="demo", scenario=scenario, output=tmp_path / "user.conf"))
    calls = []

    def fake_run(what, scenario, user_conf=None, **kw):
        calls.append((what, user_conf.read_text() if user_conf else None))
        verdict = verdicts.pop(0)  # VALID or not, or (valid, metric, median latency in ns)
        valid, metric, p50_ns = verdict if isinstance(verdict, tuple) else (verdict, 1.0, 0)
        return SimpleNamespace(summary=SimpleNamespace(valid=valid, metric_value=metric,
                                                       fields={"50.00 percentile latency (ns)": p50_ns}))

    tuner._run = fake_run
    return tuner, calls


def test_unconfirmed_conf_leaves_the_users_file_alone(tmp_path):
    good = tmp_path / "user.conf"
    good.write_text("demo.Offline.target_qps = 123\n")
    tuner, _ = _fake_tuner(tmp_path, "Offline", [False])
    result = tuner._confirm(["demo.Offline.target_qps = 999.00"], {})
    assert not result.confirmed and result.path == tmp_path / "user.conf.unconfirmed"
    assert good.read_text() == "demo.Offline.target_qps = 123\n"
    assert "999.00" in result.path.read_text()


def test_server_confirmation_backs_off_until_valid(tmp_path):
    tuner, calls = _fake_tuner(tmp_path, "Server", [False, False, True])
    result = tuner._confirm(["demo.Server.target_qps = 1000.00"], {"server_qps": 1000.0})
    assert result.confirmed and result.path == tmp_path / "user.conf"
    assert [c[1].splitlines()[1] for c in calls] == ["demo.Server.target_qps = 1000.00",
                                                      "demo.Server.target_qps = 900.00",
                                                      "demo.Server.target_qps = 810.00"]
    assert (tmp_path / "user.conf").read_text().splitlines()[1] == "demo.Server.target_qps = 810.00"
    assert not (tmp_path / "user.conf.unconfirmed").exists()


def test_offline_confirmation_that_ran_out_of_queries_follows_the_measured_rate(tmp_path):
    """A confirmation faster than LoadGen's 10% slack over the expected QPS ends before the minimum duration: it is
    run again expecting 1.25x what it measured. An INVALID run no faster than expected is not retried."""
    tuner, calls = _fake_tuner(tmp_path, "Offline", [(False, 1200.0, 0), (True, 1250.0, 0)])
    result = tuner._confirm(["demo.Offline.target_qps = 1000.00"], {})
    assert result.confirmed
    assert [c[1].splitlines()[1] for c in calls] == ["demo.Offline.target_qps = 1000.00",
                                                      "demo.Offline.target_qps = 1500.00"]
    assert calls[1][0].endswith("(it ran at 1,200.0 QPS)")
    (tmp_path / "user.conf").unlink()
    tuner, calls = _fake_tuner(tmp_path, "Offline", [(False, 1050.0, 0)])
    assert not tuner._confirm(["demo.Offline.target_qps = 1000.00"], {}).confirmed
    assert len(calls) == 1


def test_stream_confirmation_that_ran_faster_expects_the_measured_latency(tmp_path):
    tuner, calls = _fake_tuner(tmp_path, "SingleStream", [(False, 0.0, 2_000_000), (True, 0.0, 1_900_000)])
    assert tuner._confirm(["demo.SingleStream.target_latency = 5.000"], {}).confirmed
    assert calls[1][1].splitlines()[1] == "demo.SingleStream.target_latency = 1.600"


def _tune_leftovers(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("mlharness-tune-*"))


@pytest.mark.parametrize("signals", [(signal.SIGINT,), (signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)],
                         ids=["SIGINT", "SIGTERM", "SIGINT-twice"])
def test_interrupted_tune_removes_its_temporary_folder(cli_env, tmp_path, signals):
    """Ctrl-C or SIGTERM during a trial (and a second Ctrl-C, which exits at once) leaves no trial folder in the
    temporary folder."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**cli_env, "TMPDIR": str(tmp)}
    err = open(tmp_path / "stderr.txt", "w")  # noqa: SIM115 - the child writes it; closed below
    proc = subprocess.Popen([sys.executable, "-m", "mlharness.cli", "tune", "--scenario", "Offline", "--seconds",
                             "60", "--count", "64", "--output", str(tmp_path / "user.conf")],
                            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        # inside a LoadGen test: LoadGen's log is in a trial's staging folder; the second trial runs for a minute
        while not (list(tmp.glob("mlharness-tune-*/.trial_*/mlperf_log_detail.txt"))
                   and "trial 2" in (tmp_path / "stderr.txt").read_text()) and proc.poll() is None:
            assert time.monotonic() < deadline, "tune never started a trial"
            time.sleep(0.05)
        assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
        proc.send_signal(signals[0])
        for sig in signals[1:]:
            # once the first is handled: two signals that arrive before Python runs its handler are handled as one
            seen = time.monotonic() + 10
            while "interrupted by" not in (tmp_path / "stderr.txt").read_text() and proc.poll() is None:
                assert time.monotonic() < seen, "the first signal was never handled"
                time.sleep(0.002)
            proc.send_signal(sig)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert rc == 128 + signals[0], stderr
    assert "Traceback" not in stderr, stderr
    if len(signals) > 1:  # the process ended at once, where no finally block runs
        assert "interrupted again by SIGINT" in stderr, stderr
    assert _tune_leftovers(tmp) == [], stderr
    assert "mlharness-tune-" not in stderr, "a removed trial folder was named as kept partial output"
    assert not (tmp_path / "user.conf").exists()
