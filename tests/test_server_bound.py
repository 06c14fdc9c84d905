"""The Server latency bound in plain sight: which line, file or flag sets it, the bound of a model that is not an
MLPerf benchmark derived from its measured single-sample latency, and INVALID explanations whose fix, applied
once, gives a VALID run (real LoadGen, the echo predictor sleeping 30 ms per batch)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from mlharness.calibration.explain import explain
from mlharness.calibration.server_bound import derived_ms, resolve
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import Summary
from mlharness.measurement.tune import gave_up_reason
from mlharness.run.options import RunResult
from tests.helpers.toy_manifest import toy_manifest

DATA = Path(__file__).parent / "data" / "loadgen_invalid"


def _bound(model: str, user_conf: Path | None = None, flag_ms: float | None = None):
    plan = lgs.SettingsPlan(model=model, official=True, scenario="Server", mode="performance", user_conf=user_conf,
                            overrides=lgs.Overrides(target_latency_ms=flag_ms), audit_config=None)
    return resolve(plan, lgs.build_test_settings(plan))


def _conf_line(text: str) -> int:
    return next(no for no, line in enumerate(lgs.embedded_mlperf_conf().splitlines(), 1) if line.startswith(text))


def test_each_source_of_the_bound_is_named_with_its_line(tmp_path):
    b = _bound("resnet50")
    assert (b.ms, b.kind) == (15.0, "benchmark")
    assert f"the benchmark's line of mlperf.conf (line {_conf_line('resnet50.Server.target_latency')}: " \
           "resnet50.Server.target_latency = 15)" in b.source
    b = _bound("mymodel")
    assert (b.ms, b.kind) == (10.0, "default") and "mlperf.conf's default for models that are not MLPerf " \
        f"benchmarks (line {_conf_line('*.Server.target_latency')}: *.Server.target_latency = 10)" in b.source
    conf = tmp_path / "my.conf"
    conf.write_text("# mine\n*.Offline.target_qps = 5\nmymodel.Server.target_latency = 42\n")
    b = _bound("mymodel", conf)
    assert (b.ms, b.kind) == (42.0, "user.conf")
    assert b.source == f"the user.conf {conf}, line 3 (mymodel.Server.target_latency = 42)"
    b = _bound("mymodel", conf, flag_ms=77)
    assert (b.ms, b.kind, b.source) == (77.0, "flag", "the command line (--target-latency-ms)")
    assert b.line().startswith("Server latency bound: p99 latency <= 77 ms, from the command line")
    assert derived_ms(1.0) == 10.0 and derived_ms(30.1) == 151.0  # max(10 ms, 5 x p99), up to a whole ms


def test_a_bound_below_one_sample_says_no_rate_meets_it_and_which_bound_would():
    text = (DATA / "server_over_latency.summary.txt").read_text()
    bound = {"target_latency": {"ms": 10.0, "source": "the command line (--target-latency-ms)", "kind": "flag",
                                "single_sample_p99_ms": 30.4, "key": "target_latency"}}
    e = explain(text, [], "Server", "slow", bound)
    lines = e.lines()
    assert "latency bound: p99 <= 10 ms, from the command line (--target-latency-ms)" in lines
    assert ("even one sample at a time takes p99 30.4 ms > the bound 10 ms: no rate meets this bound; a bound "
            "this model can meet: --target-latency-ms 152") in lines
    assert [f.flag for f in e.fixes] == ["--target-latency-ms 152"]  # no lower rate: it would not help
    assert e.fixes[0].conf_line == "slow.Server.target_latency = 152"
    # without a recorded bound, a lower rate comes with the queries early stopping needs
    e = explain(text, [], "Server", "slow")
    assert [f.flag for f in e.fixes] == ["--target-qps 134.9 --min-query-count 700"]
    assert "latency bound: p99 <= 10 ms, from the run's TestSettings" in e.lines()[1]


def test_tune_gives_up_naming_the_bound_and_the_measured_latency():
    summary = Summary("Server", False, "Completed samples per second", 3.0, "samples/s",
                      {"99.00 percentile latency (ns)": "61000000"})
    md = {"latency_bound": {"target_latency": {"ms": 10.0, "source": "mlperf.conf's default", "kind": "default",
                                               "single_sample_p99_ms": 30.4}}}
    reason = gave_up_reason(RunResult(Path("x"), summary, None, md))
    assert reason == (" under the latency bound p99 <= 10 ms from mlperf.conf's default; the last trial measured "
                      "p99 61 ms, one sample at a time p99 30.4 ms; no rate meets this bound: "
                      "--target-latency-ms 152 is one the model can")


def _slow_model(tmp_path: Path) -> Path:
    """A model that is no MLPerf benchmark, 30 ms per batch of up to 8 (3x mlperf.conf's 10 ms default)."""
    m = toy_manifest(graph_path="slow.bin", count=16, options={"sleep_ms": 30})
    m["name"] = "slowecho"
    m["batching"] = {"max_batchsize": 8}
    (tmp_path / "slow.bin").write_bytes(b"")
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(m))
    return path


def _server(run_cli, manifest: Path, out: Path, *extra: str):
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Server", "--mode", "performance",
                   "--min-duration-ms", "2000", "--no-progress", "--output", str(out), *extra, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads((out / "mlharness_run.json").read_text())


@pytest.mark.slow
def test_slow_non_benchmark_model_gets_a_derived_bound_and_the_printed_fix_converges(run_cli, tmp_path):
    manifest = _slow_model(tmp_path)
    # no bound given: derived from the measured 30 ms, the run is VALID (mlperf.conf's 10 ms never could be)
    proc, md = _server(run_cli, manifest, tmp_path / "derived")
    m = re.search(r"Server latency bound: p99 latency <= (\d+) ms, from the model's measured latency: max\(10 ms, "
                  r"5 x the single-sample p99 ([\d.]+) ms\)", proc.stderr)
    assert m, proc.stderr
    bound = md["latency_bound"]["target_latency"]
    assert bound["kind"] == "derived" and bound["ms"] == float(m.group(1)) >= 5 * 30
    assert md["settings"]["server_target_latency_ns"] == int(bound["ms"] * 1e6)
    assert any("derived from the model's measured latency" in r for r in md["not_submittable_reasons"])
    assert "VALID" in proc.stdout and "INVALID" not in proc.stdout, proc.stdout

    # the user forces 10 ms: INVALID, the explanation names the bound, its source and the bound that would work
    forced = ("--target-latency-ms", "10", "--min-query-count", "10")
    proc, md = _server(run_cli, manifest, tmp_path / "forced", *forced)
    assert "Server latency bound: p99 latency <= 10 ms, from the command line (--target-latency-ms)" in proc.stderr
    assert "INVALID because: latency bound not met" in proc.stdout, proc.stdout
    assert "latency bound: p99 <= 10 ms, from the command line (--target-latency-ms)" in proc.stdout
    assert "the ideal-queue rate 0 QPS" not in proc.stderr and "over the latency bound 10 ms, so no rate keeps it" in proc.stderr
    fix = re.search(r"even one sample at a time takes p99 [\d.]+ ms > the bound 10 ms: no rate meets this bound; "
                    r"a bound this model can meet: --target-latency-ms (\d+)", proc.stdout)
    assert fix, proc.stdout
    assert re.search(rf"^fix: --target-latency-ms {fix.group(1)} ", proc.stdout, re.M)
    assert md["latency_bound"]["target_latency"]["kind"] == "flag"

    # the explicit --min-query-count 10 was kept (never raised), and said to be too few for early stopping
    assert "development shortcut: min_query_count 10 from --min-query-count is kept" in proc.stderr, proc.stderr
    assert md["settings"]["min_query_count"] == 10
    # the printed next command line (the fix with every flag the next run needs), run as printed: VALID
    line = re.search(r"^next run: (mlharness run .*)$", proc.stdout, re.M)
    assert line, proc.stdout
    words = shlex.split(line.group(1))
    assert words[words.index("--target-latency-ms") + 1] == fix.group(1)
    # a new bound for a rate this run calibrated: the next run calibrates against it (no rate measured against
    # the old bound, no count of 10 too small for early stopping)
    assert words[words.index("--min-duration-ms") + 1] == "2000"
    assert "--target-qps" not in words and "--min-query-count" not in words
    out = tmp_path / "fixed"
    proc = run_cli(*words[1:], "--no-progress", "--output", str(out), timeout=240)
    assert proc.returncode == 0, proc.stderr
    md = json.loads((out / "mlharness_run.json").read_text())
    assert "INVALID" not in proc.stdout and "VALID" in proc.stdout, proc.stdout + proc.stderr
    assert md["latency_bound"]["target_latency"]["ms"] == float(fix.group(1))


def test_an_interactive_run_names_its_token_bounds_and_their_user_conf_lines(run_cli, tmp_path):
    from tests.test_generative import SERVER_PERF, toy

    conf = tmp_path / "user.conf"
    conf.write_text("token_toy-interactive.Server.ttft_latency = 400\ntoken_toy-interactive.Server.tpot_latency = 30\n")
    proc = run_cli("run", "--manifest", str(toy(tmp_path)), "--scenario", "Interactive", "--no-progress",
                   "--user-conf", str(conf), "--output", str(tmp_path / "out"), *SERVER_PERF, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (f"Server latency bound: p99 time to first token <= 400 ms, from the user.conf {conf}, line 1 "
            "(token_toy-interactive.Server.ttft_latency = 400)") in proc.stderr, proc.stderr
    assert f"p99 time per output token <= 30 ms, from the user.conf {conf}, line 2" in proc.stderr
    md = json.loads((tmp_path / "out" / "mlharness_run.json").read_text())
    assert md["latency_bound"]["ttft_latency"]["kind"] == "user.conf"
