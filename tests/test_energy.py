"""The run's energy from RAPL counters: a stand-in powercap tree (package, DRAM and core zones, an mmio zone that
repeats the package), counters that wrap, unreadable counters, and a real run whose counters a thread advances
at a known power."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from mlharness.telemetry.energy import POWERCAP_ENV, EnergyMeter, per_sample

WATTS = 10.0


def zone(root: Path, name: str, label: str, uj: float, wrap_uj: float = 1e9) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{int(uj)}\n")
    (z / "max_energy_range_uj").write_text(f"{int(wrap_uj)}\n")
    return z


def set_uj(z: Path, uj: float) -> None:
    tmp = z / "energy_uj.new"
    tmp.write_text(f"{int(uj)}\n")
    os.replace(tmp, z / "energy_uj")  # a reader sees the old value or the new, never half a write


@pytest.fixture
def powercap(tmp_path):
    root = tmp_path / "powercap"
    zones = {"package": zone(root, "intel-rapl:0", "package-0", 990e6),
             "dram": zone(root, "intel-rapl:0:0", "dram", 5e6),
             "core": zone(root, "intel-rapl:0:1", "core", 7e6),
             "mmio": zone(root, "intel-rapl-mmio:0", "package-0", 1e6)}
    return root, zones


def test_package_and_dram_are_summed_and_a_wrap_adds_the_range(powercap):
    root, z = powercap
    meter = EnergyMeter(root, nvml=False)
    assert [c.name for c in meter.counters] == ["package-0", "dram (package-0)", "core (package-0)"]
    meter.start()
    set_uj(z["package"], 995e6)  # +5 J
    set_uj(z["mmio"], 50e6)  # not read: it repeats the package's counter
    meter.tick()
    set_uj(z["package"], 3e6)  # wrapped at 1000 J: +8 J
    set_uj(z["dram"], 7e6)  # +2 J
    set_uj(z["core"], 10e6)  # +3 J, a part of the package's
    e = meter.stop()
    assert e["available"] and e["joules"] == pytest.approx(15.0)
    by_name = {d["name"]: d for d in e["domains"]}
    assert by_name["package-0"]["joules"] == pytest.approx(13.0)
    assert by_name["core (package-0)"]["joules"] == pytest.approx(3.0) and not by_name["core (package-0)"]["in_total"]
    assert e["idle_watts"] is None and "joules_above_idle" not in e
    assert per_sample(e, 30)["joules_per_sample"] == pytest.approx(0.5)


def test_no_counter_says_why_and_holds_no_figure(tmp_path, powercap):
    empty = EnergyMeter(tmp_path / "nothing", nvml=False).stop()
    assert empty == {"available": False, "why": f"no RAPL zone in {tmp_path / 'nothing'}; NVML not asked"}
    root, z = powercap
    for zone_dir in z.values():
        (zone_dir / "energy_uj").unlink()
        os.mkfifo(zone_dir / "energy_uj")  # a counter that cannot be read (as one readable by root only)
    e = EnergyMeter(root, nvml=False).stop()
    assert not e["available"] and "energy_uj cannot be read" in e["why"] and "joules" not in e
    assert per_sample(e, 10) == e


def test_a_run_reports_the_power_its_counters_show(run_cli, cli_env, powercap, tmp_path):
    """A thread advances the package counter at 10 W of wall time while `mlharness run` reads it: the run's
    mean and idle power are 10 W, its joules per sample its joules over its completed samples."""
    root, z = powercap
    stop, t0 = threading.Event(), time.monotonic()

    def advance():
        while not stop.wait(0.005):
            set_uj(z["package"], (time.monotonic() - t0) * WATTS * 1e6)

    thread = threading.Thread(target=advance, daemon=True)
    thread.start()
    try:
        proc = run_cli("run", "--scenario", "Offline", "--mode", "performance", "--min-duration-ms", "1000",
                       "--count", "64", "--output", str(tmp_path / "run"), "--no-progress",
                       env={**cli_env, POWERCAP_ENV: str(root)}, timeout=240)
    finally:
        stop.set()
        thread.join(5)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "run" / "mlharness_run.json").read_text())
    e = meta["telemetry"]["energy"]
    assert e["available"] and e["seconds"] > 0.5
    assert e["watts"] == pytest.approx(WATTS, rel=0.2) and e["idle_watts"] == pytest.approx(WATTS, rel=0.2)
    assert e["joules_per_sample"] == pytest.approx(e["joules"] / meta["samples"]["completed"])
    assert "energy" in proc.stdout and " W mean (idle " in proc.stdout
    report = run_cli("report", str(tmp_path / "run"), "--md", str(tmp_path / "report.md"), timeout=120)
    assert report.returncode == 0, report.stderr
    assert f"energy: {e['joules']:,.1f} J over" in (tmp_path / "report.md").read_text()
    # the evaluation database holds the figures as the run's metrics
    index = run_cli("results", "index", str(tmp_path / "run"), timeout=120)
    assert index.returncode == 0, index.stderr
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from mlharness.results_db.db import open_db, sqlite_url
    from mlharness.results_db.models import Metric

    engine = open_db(sqlite_url(tmp_path / "run"))
    with Session(engine) as s:
        stored = dict(s.execute(select(Metric.name, Metric.value)).all())
    engine.dispose()
    history = run_cli("results", "history", "energy.joules", str(tmp_path / "run"), timeout=120)
    assert history.returncode == 0 and f"{e['joules']:.4g}"[:4] in history.stdout, history.stdout + history.stderr
    assert {k: stored[f"energy.{k}"] for k in ("joules", "watts", "idle_watts", "joules_per_sample")} == \
        pytest.approx({k: e[k] for k in ("joules", "watts", "idle_watts", "joules_per_sample")})
