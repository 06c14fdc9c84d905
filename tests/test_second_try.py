"""A Server rate mlharness calibrated, found too high by LoadGen, is played once more at the explained lower rate
within the same run (mlharness.calibration.second_try); a rate the user stated, or --no-second-try, is not.

The demo model runs under a kind whose calibration overshoots: it calibrates as the tensor kind does, then asks
LoadGen for twenty times that rate, what a host that slowed down after calibration looks like to the run. Real
LoadGen, real ONNX Runtime; the first play is INVALID for its latency bound."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mlharness.calibration.second_try import FIRST_TRY_DIR
from mlharness.kinds import registry
from mlharness.kinds.base import Kind
from mlharness.kinds.tensor import kind as tensor
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import detail_values, parse_summary
from mlharness.paths import MANIFESTS_DIR
from mlharness.run.options import RunOptions
from mlharness.run.runner import run

OVERSHOOT = 20.0
MIN_MS = 1000


def overshooting(parts):
    """Server: twenty times the calibrated rate (the run cannot keep up); Offline: a twentieth of it (the run
    outruns it and its one query ends before the minimum duration)."""
    cal = tensor.calibration(parts)
    if cal.get("calibrated") and cal.get("key") == "target_qps":
        offline = cal.get("scenario") == "Offline"
        value = cal["value"] / OVERSHOOT if offline else cal["value"] * OVERSHOOT
        if offline:
            parts.conf.settings.offline_expected_qps = value
        else:
            parts.conf.settings.server_target_qps = value
        cal = {**cal, "value": value}
        with (parts.outdir / "user.conf").open("a") as conf:
            conf.write(f"demo.{cal['scenario']}.target_qps = {value:g}\n")
    return cal


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    registry.register(Kind("overshoot", make_sut=tensor.make_sut, server_bound=tensor.bound, calibrate=overshooting,
                           check_outputs=True))
    text = (MANIFESTS_DIR / "demo" / "demo.yaml").read_text()
    path = tmp_path_factory.mktemp("second") / "demo.yaml"
    path.write_text(text.replace("response:\n  element_type: float32", "response:\n  kind: overshoot\n"
                                 "  element_type: float32"))
    yield path
    registry.unregister("overshoot")


def _run(manifest: Path, out: Path, said: list[str], scenario: str = "Server", **kw):
    return run(RunOptions(scenario=scenario, mode="performance", manifest=manifest, output=out, count=64,
                          say=said.append, overrides=lgs.Overrides(min_duration_ms=MIN_MS, **kw.pop("ov", {})), **kw))


def test_an_overshot_calibrated_rate_is_played_once_more_lower(manifest, tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    said: list[str] = []
    result = _run(manifest, tmp_path / "out", said)
    out = tmp_path / "out"
    first = out / FIRST_TRY_DIR
    # the first play: INVALID at the overshot rate, its LoadGen logs kept whole
    first_summary = parse_summary(first / "mlperf_log_summary.txt", "Server")
    assert not first_summary.valid
    first_qps = float(detail_values(first / "mlperf_log_detail.txt")["effective_target_qps"])
    md = json.loads((out / "mlharness_run.json").read_text())
    cal = md["calibration"]
    assert cal["calibrated"] and abs(cal["value"] - first_qps) / first_qps < 1e-3
    second = cal["second_try"]
    assert second["first"]["target_qps"] == pytest.approx(first_qps, rel=1e-6)
    # the second play: the explanation's rate, half of what the first completed at most, LoadGen given it
    done = first_summary.metric_value
    assert second["target_qps"] <= 0.5 * min(first_qps, done) * 1.001
    detail = detail_values(out / "mlperf_log_detail.txt")
    assert float(detail["effective_target_qps"]) == pytest.approx(second["target_qps"], rel=1e-6)
    assert int(detail["effective_min_query_count"]) == second["min_query_count"]
    # said before the second play, with why
    line = next(s for s in said if s.startswith("second try:"))
    assert re.search(r"p99 latency [\d.]+ ms over its bound [\d.]+ ms", line), line
    # the written user.conf ends with what the second play used; the first's is kept with its logs
    conf = (out / "user.conf").read_text().splitlines()
    assert conf[-2:] == [f"demo.Server.target_qps = {second['target_qps']:g}",
                         f"demo.Server.min_query_count = {second['min_query_count']}"]
    assert "second" not in (first / "user.conf").read_text().lower()
    assert result.summary.valid == md["result"]["valid"]


def test_a_stated_rate_or_no_second_try_is_played_once(manifest, tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    said: list[str] = []
    _run(manifest, tmp_path / "stated", said, ov={"target_qps": 200000.0, "min_query_count": 400})
    _run(manifest, tmp_path / "off", said, second_try=False)
    for name in ("stated", "off"):
        out = tmp_path / name
        assert not (out / FIRST_TRY_DIR).exists()
        assert not parse_summary(out / "mlperf_log_summary.txt", "Server").valid
        assert "second_try" not in json.loads((out / "mlharness_run.json").read_text())["calibration"]
    assert not any(s.startswith("second try:") for s in said)


def test_an_offline_run_that_outran_its_calibrated_rate_is_played_once_more_expecting_more(manifest, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    said: list[str] = []
    result = _run(manifest, tmp_path / "out", said, scenario="Offline")
    out = tmp_path / "out"
    first = parse_summary(out / FIRST_TRY_DIR / "mlperf_log_summary.txt", "Offline")
    assert not first.valid and "Min duration satisfied : NO" in (out / FIRST_TRY_DIR / "mlperf_log_summary.txt"
                                                                 ).read_text()
    md = json.loads((out / "mlharness_run.json").read_text())
    second = md["calibration"]["second_try"]
    # the second play expects more than the first play measured, and LoadGen was given it
    assert second["target_qps"] > first.metric_value > second["first"]["target_qps"]
    detail = detail_values(out / "mlperf_log_detail.txt")  # LoadGen logs the rate to six significant digits
    assert float(detail["effective_target_qps"]) == pytest.approx(second["target_qps"], rel=1e-5)
    assert (out / "user.conf").read_text().splitlines()[-2] == f"demo.Offline.target_qps = {second['target_qps']:g}"
    assert any(s.startswith("second try:") and "min duration not met" in s for s in said), said
    assert result.summary.valid and md["result"]["valid"]
    # readers of a results tree see one run: first_try/ is part of it (the report, compare, the database)
    from mlharness.report.collect import find_runs
    from mlharness.results_db.folders import walk

    assert [r.rel for r in find_runs(tmp_path)[0]] == ["out"] and [f.rel for f in walk(tmp_path)] == ["out"]
