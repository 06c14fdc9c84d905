"""`mlharness tune` writes a user.conf that LoadGen accepts and with which a short run is VALID."""

from __future__ import annotations

import pytest

from mlharness.loadgen.settings import validate_user_conf

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("scenario,key", [("Offline", "target_qps"), ("SingleStream", "target_latency")])
def test_tune_writes_a_conf_that_makes_a_valid_run(run_cli, tmp_path, scenario, key):
    conf = tmp_path / "user.conf"
    proc = run_cli("tune", "--scenario", scenario, "--seconds", "0.6", "--count", "64", "--output", str(conf),
                   timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "confirmation run: VALID" in proc.stdout
    lines = validate_user_conf(conf, "demo")  # LoadGen-valid keys for this model only
    assert [(m, s, k) for _, m, s, k, _ in lines] == [("demo", scenario, key)]
    value = float(lines[0][4])
    assert value > 0
    # an independent run with that user.conf (and only a shorter duration) is VALID too
    out = tmp_path / "confirm"
    proc = run_cli("run", "--scenario", scenario, "--mode", "performance", "--user-conf", str(conf),
                   "--min-duration-ms", "400", "--min-query-count", "64", "--count", "64", "--output", str(out),
                   "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "Result is : VALID" in (out / "mlperf_log_summary.txt").read_text()
