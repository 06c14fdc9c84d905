"""``mlharness sweep``: real LoadGen runs over target QPS (a toy model of fixed capacity and the demo model, Server)
and over concurrency (the tiny
random Llama), each point's figures read back from its own LoadGen summary, goodput recounted from LoadGen's
trace, and a sweep stopped by SIGTERM then resumed without redoing its finished points."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlharness.errors import MLHarnessError
from mlharness.measurement import sweep_plan as sp
from mlharness.measurement.goodput import parse_slos

POINT_KEYS = {"label", "value", "repeat", "dir", "valid", "invalid_reasons", "throughput", "latency_ms", "ttft_ms",
              "tpot_ms", "tokens_per_s", "tokens_per_s_per_user", "goodput", "goodput_fraction"}
TOP_KEYS = {"kind", "version", "manifest", "scenario", "axis", "slo", "plan", "points", "knee", "max_valid"}
PCTS = {"p50": "50.00", "p90": "90.00", "p95": "95.00", "p99": "99.00", "p99.9": "99.90"}
NEW_TOKENS = 8


def cli(*args: str, env: dict, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def summary_lines(folder: Path) -> dict[str, str]:
    """LoadGen's summary as 'name : value' pairs, read here without mlharness."""
    out: dict[str, str] = {}
    for line in (folder / "mlperf_log_summary.txt").read_text().splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            out.setdefault(k.strip(), v.strip())
    return out


def trace_samples(folder: Path) -> list[dict]:
    """Per sample: latency_ns, and ttft_ns where the trace has a first-token counter at the sample's schedule."""
    text = (folder / "mlperf_log_trace.json").read_text()
    begin = re.compile(r'"name":"Sample".*"ph":"b".*"ts":([0-9.]+).*"complete_ns":(\d+)')
    token = re.compile(r'"name":"Token_Latency".*"ts":([0-9.]+).*"issue_delay":(\d+),"issue_to_done":(\d+)')
    firsts = {m.group(1): int(m.group(2)) + int(m.group(3)) for m in token.finditer(text)}
    return [{"latency_ns": int(m.group(2)), "ttft_ns": firsts.get(m.group(1))} for m in begin.finditer(text)]


def check_against_summary(sweep_dir: Path, point: dict) -> None:
    folder = sweep_dir / point["dir"]
    s = summary_lines(folder)
    assert point["valid"] == (s["Result is"] == "VALID")
    assert point["throughput"] == float(s["Completed samples per second"])
    for key, line in (("latency_ms", "{} percentile latency (ns)"),
                      ("ttft_ms", "{} percentile first token latency (ns)"),
                      ("tpot_ms", "{} percentile time to output token (ns)")):
        if line.format("50.00") not in s:
            assert point[key] is None
            continue
        assert point[key] == {k: float(s[line.format(p)]) / 1e6 for k, p in PCTS.items()}
    if "Completed tokens per second" in s:
        assert point["tokens_per_s"] == float(s["Completed tokens per second"])


# A model whose capacity does not depend on the host's speed: each sample's postprocess sleeps 1 ms, so under a
# thousand samples/s, and the knee lies well inside 200..25,600 QPS on any machine (the demo model alone kept up
# with 12,800 QPS on a quiet host). Each point has the rules' minimum of queries (700): 3.5 s at 200 QPS.
SLOW_POST = "import time\n\n\ndef postprocess(ctx, outputs):\n    time.sleep(0.001)\n    return outputs[0]\n"
SLO_NS = 10_000_000


@pytest.fixture(scope="module")
def server_sweep(tmp_path_factory, env) -> tuple[Path, dict, str]:
    import yaml

    from tests.helpers.toy_manifest import toy_manifest

    root = tmp_path_factory.mktemp("sweep")
    (root / "model.bin").write_bytes(b"placeholder: the echo predictor never reads it")
    m = toy_manifest(warmup=0, count=64)
    m["postprocess"] = SLOW_POST
    (root / "slow.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    out = root / "slow"
    proc = cli("sweep", "--manifest", str(root / "slow.yaml"), "--scenario", "Server", "--min-qps", "200",
               "--max-qps", "25600", "--points", "8", "--min-duration-ms", "500", "--slo", "latency_p99=10ms",
               "--output", str(out), env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return out, json.loads((out / "sweep.json").read_text()), proc.stdout


def test_server_sweep_finds_the_knee(server_sweep):
    out, state, stdout = server_sweep
    assert TOP_KEYS <= set(state) and state["kind"] == "mlharness-sweep" and state["version"] == 1
    assert state["axis"] == "target_qps" and state["plan"] == "adaptive" and state["slo"] == {"latency_p99": 0.01}
    values = [p["value"] for p in state["points"]]
    assert {200, 400} <= set(values)  # adaptive: doubling from --min-qps
    # every point had the rules' minimum of queries, so any of them may be the knee
    assert all(p["meaningful"] and p["samples"] >= 700 and p["min_queries"] == 700 for p in state["points"])
    knee = state["knee"]
    assert knee is not None and knee["value"] in values, state["aggregates"]
    at = next(a for a in state["aggregates"] if a["value"] == knee["value"])
    floor = min(a["latency_p99_ms"]["median"] for a in state["aggregates"] if a["value"] < knee["value"])
    # the knee's own figures show the bend its reason names
    assert (at["throughput"]["median"] < 0.9 * knee["value"] or at["latency_p99_ms"]["median"] >= 3 * floor)
    valid = [p["value"] for p in state["points"] if p["valid"]]
    assert state["max_valid"] == (max(valid) if valid else None)
    assert f"knee: {knee['value']:g} QPS" in stdout
    for p in state["points"]:
        assert POINT_KEYS <= set(p)
        assert (out / p["dir"]).is_dir() and p["dir"] == f"points/{p['label']}"
        assert re.fullmatch(r"qps-\d{6}\.\d{3}-r1", p["label"])


def test_point_figures_equal_their_loadgen_summary(server_sweep):
    out, state, _ = server_sweep
    for p in state["points"]:
        check_against_summary(out, p)
        s = summary_lines(out / p["dir"])
        no = sorted(f"{k}: NO" for k, v in s.items() if v == "NO")
        assert sorted(p["invalid_reasons"]) == ([] if p["valid"] else no) and (p["valid"] or no)


def test_goodput_is_the_count_of_samples_within_the_slo(server_sweep):
    out, state, _ = server_sweep
    fractions = []
    for p in state["points"]:
        samples = trace_samples(out / p["dir"])
        assert len(samples) == p["samples"] > 0
        good = sum(1 for s in samples if s["latency_ns"] <= SLO_NS)
        assert p["good_samples"] == good
        assert p["goodput"] == pytest.approx(p["throughput"] * good / len(samples), rel=1e-12)
        assert p["goodput_fraction"] == pytest.approx(good / len(samples), rel=1e-12)
        fractions.append(p["goodput_fraction"])
    assert min(fractions) < 1.0  # a 10 ms bound that some samples miss: the count is not trivially everything
    assert max(fractions) > 0.0  # ... and that others meet


@pytest.fixture(scope="module")
def llama8(tmp_path_factory) -> Path:
    """llama3.1-8b-random generating exactly NEW_TOKENS tokens per sample (a short run; fixed counts per sample)."""
    from mlharness.manifest.loader import resolve_manifest_path

    text = resolve_manifest_path("llama3.1-8b-random", "model").read_text()
    text = text.replace("max_new_tokens: 128", f"max_new_tokens: {NEW_TOKENS}")
    text = text.replace("min_new_tokens: 2", f"min_new_tokens: {NEW_TOKENS}")
    assert f"min_new_tokens: {NEW_TOKENS}" in text
    path = tmp_path_factory.mktemp("llama8") / "llama3.1-8b-random.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
@pytest.mark.timing  # the knee is read from measured throughput: a second worker on the CPU moves it
def test_concurrency_sweep_of_the_random_llama(tmp_path, env, llama8):
    out = tmp_path / "llama"
    proc = cli("sweep", "--manifest", str(llama8), "--scenario", "Server", "--concurrency", "1,8,16,32",
               "--queries", "8", "--count", "8", "--seconds", "0.1", "--slo", "ttft_p99=3s,tpot_p99=60ms",
               "--output", str(out), env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    state = json.loads((out / "sweep.json").read_text())
    assert state["axis"] == "concurrency" and [p["label"] for p in state["points"]] == [
        "conc-0001-r1", "conc-0008-r1", "conc-0016-r1", "conc-0032-r1"]
    # 8 queries: 8, 16 and 32 requests in flight run the same way, so the curve ends flat
    knee = state["knee"]
    assert knee is not None, state["aggregates"]
    tps = {p["value"]: p["tokens_per_s"] for p in state["points"]}
    best = max(tps.values())
    assert tps[knee["value"]] >= 0.85 * best and all(t < 0.85 * best for v, t in tps.items() if v < knee["value"])
    for p in state["points"]:
        check_against_summary(out, p)
        meta = json.loads((out / p["dir"] / "mlharness_run.json").read_text())
        assert meta["batching"]["max_batchsize"] == p["value"]  # the in-flight cap of the engine
        assert p["tokens_per_s_per_user"] == pytest.approx(1000 / p["tpot_ms"]["p50"])
        samples = trace_samples(out / p["dir"])
        assert len(samples) == 8 and all(s["ttft_ns"] is not None for s in samples)
        good = sum(1 for s in samples if s["ttft_ns"] <= 3e9
                   and (s["latency_ns"] - s["ttft_ns"]) / (NEW_TOKENS - 1) <= 60e6)
        assert p["good_samples"] == good
        assert p["goodput"] == pytest.approx(p["throughput"] * good / 8, rel=1e-12)


@pytest.mark.slow
def test_tpot_of_each_sample_uses_the_token_counts_loadgen_logged(tmp_path, env, llama8):
    """Generation whose length may vary (min 2 tokens): each sample's count comes from the accuracy log, which the
    sweep has LoadGen fill for every sample; per-sample TPOT then spans exactly LoadGen's min..max TPOT."""
    varying = tmp_path / "llama3.1-8b-random.yaml"
    varying.write_text(llama8.read_text().replace(f"min_new_tokens: {NEW_TOKENS}", "min_new_tokens: 2"))
    out = tmp_path / "varying"
    proc = cli("sweep", "--manifest", str(varying), "--concurrency", "4", "--queries", "8", "--count", "8",
               "--seconds", "0.1", "--slo", "tpot_p99=150ms", "--output", str(out), env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (point,) = json.loads((out / "sweep.json").read_text())["points"]
    folder = out / point["dir"]
    counts = {e["seq_id"]: e["token_count"] for e in json.loads((folder / "mlperf_log_accuracy.json").read_text())}
    samples = trace_samples(folder)
    assert len(counts) == len(samples) == 8
    seqs = [int(m) for m in re.findall(r'"name":"Sample".*"ph":"b".*"sample_seq":(\d+)',
                                         (folder / "mlperf_log_trace.json").read_text())]
    tpot = [(s["latency_ns"] - s["ttft_ns"]) // (counts[q] - 1) for s, q in zip(samples, seqs, strict=True)]
    s = summary_lines(folder)
    assert (min(tpot), max(tpot)) == (int(s["Min Time per Output Token (ns)"]),
                                      int(s["Max Time per Output Token (ns)"]))
    assert point["good_samples"] == sum(1 for x in tpot if x <= 150e6)


def test_sigterm_then_resume_redoes_nothing_finished(tmp_path, env):
    out = tmp_path / "resumable"
    # short points (--min-query-count 10): what is resumed, not what they show
    args = ["sweep", "--manifest", "demo", "--qps", "150,300,450", "--min-duration-ms", "1500", "--min-query-count",
            "10", "--output", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "mlharness.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            path = out / "sweep.json"
            if path.is_file() and json.loads(path.read_text())["points"]:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("the first point never finished")
        time.sleep(0.3)  # into the second point's run
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr
    state = json.loads((out / "sweep.json").read_text())
    finished = {p["label"]: p for p in state["points"]}
    assert finished and len(finished) < 3 and state["complete"] is False
    before = {label: ((out / p["dir"] / "mlperf_log_summary.txt").stat().st_mtime_ns,
                      (out / p["dir"] / "mlperf_log_detail.txt").read_text()) for label, p in finished.items()}
    # a run folder that sweep.json does not record (as if the process ended between the run and the record)
    stray = out / "points" / "qps-000450.000-r1"
    if not stray.exists():
        shutil.copytree(out / state["points"][0]["dir"], stray)
    stray_detail = (stray / "mlperf_log_detail.txt").read_text()

    again = cli(*args, env=env)
    assert again.returncode != 0 and "never writes over" in again.stderr
    other = cli(*args[:4], "150,300", *args[5:], "--resume", env=env)
    assert other.returncode != 0 and "options differ" in other.stderr and "values" in other.stderr

    resumed = cli(*args, "--resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads((out / "sweep.json").read_text())
    assert final["complete"] is True
    assert [p["label"] for p in final["points"]] == ["qps-000150.000-r1", "qps-000300.000-r1", "qps-000450.000-r1"]
    for label, (mtime, detail) in before.items():
        p = next(x for x in final["points"] if x["label"] == label)
        assert p == finished[label]  # the recorded point as it was
        assert (out / p["dir"] / "mlperf_log_summary.txt").stat().st_mtime_ns == mtime
        assert (out / p["dir"] / "mlperf_log_detail.txt").read_text() == detail  # same run (its timestamps)
    for p in final["points"]:  # a table per point the resumed sweep measured, none for the others
        assert (f"{p['label']} (" in resumed.stdout) == (p["label"] not in before)
    kept = sorted(x.name for x in (out / "points").iterdir() if ".failed-" in x.name)
    assert any(name.startswith("qps-000450.000-r1.failed-") for name in kept), kept
    assert (stray / "mlperf_log_detail.txt").read_text() != stray_detail  # measured again, not trusted
    assert all(name.split(".failed-")[0] not in before for name in kept)  # no finished point was touched


def test_slo_and_plan_parsing():
    assert parse_slos("ttft_p99=500ms, tpot_p99=30ms") == {"ttft_p99": 0.5, "tpot_p99": 0.03}
    assert parse_slos("latency_p99.9=2s") == {"latency_p99.9": 2.0}
    for bad, words in (("ttft=5ms", "expected NAME=VALUE"), ("latency_p99=20", "needs a unit"),
                       ("latency_p98=2ms", "not one LoadGen reports"), ("tpot_p99=0ms", "above zero"),
                       ("ttft_p99=1s,ttft_p99=2s", "twice")):
        with pytest.raises(MLHarnessError, match=words):
            parse_slos(bad)
    assert sp.planned("log2", 1, 64, 3, True) == [1, 2, 4, 8, 16, 32, 64]
    assert sp.planned("log2", 1, 4, 5, True) == [1, 2, 3, 4]
    assert sp.planned("log2", 1, 2, 5, True) == [1, 2]
    assert sp.planned("even", 10, 40, 4, False) == [10.0, 20.0, 30.0, 40.0]
    with pytest.raises(MLHarnessError, match="must be above zero"):
        sp.parse_values("1,-2", True, "--concurrency")


def _agg(value, tput, p99=1.0, ok=True):
    return {"value": value, "repeats": 1, "valid": ok, "constraints_met": ok,
            "throughput": {"median": tput}, "latency_p99_ms": {"median": p99}, "tokens_per_s": None}


def test_adaptive_plan_doubles_then_bisects():
    step = lambda aggs: sp.adaptive_next(aggs, "target_qps", 10, 1000, 8, False)  # noqa: E731
    assert step([]) == 10
    assert step([_agg(10, 10), _agg(20, 20)]) == 40
    # 80 QPS broke its latency constraint: one more doubling to confirm it, then bisection between 40 and 80
    aggs = [_agg(10, 10), _agg(20, 20), _agg(40, 40), _agg(80, 79, 2.0, ok=False)]
    assert step(aggs) == 160
    assert step([*aggs, _agg(160, 150, 2.5, ok=False)]) == pytest.approx(56.569)
    # a steep latency rise is the knee: no confirmation, bisection at once
    aggs[-1] = _agg(80, 79, 50.0, ok=False)
    assert step(aggs) == pytest.approx(56.569)
    # a broken rate followed by a kept one was noise: the doubling goes on
    assert step([_agg(10, 10, 9.0, ok=False), _agg(20, 20)]) == 40
    assert sp.find_knee(aggs, "target_qps")["value"] == 80  # 50 ms is over 3x the 1 ms below
    # a latency spike at 20 QPS is no knee: 50 ms at 80 QPS is over 3x the 1 ms floor below it
    spiky = [_agg(10, 10, 1.0), _agg(20, 20, 2.5), _agg(40, 40, 1.5), _agg(80, 80, 50.0)]
    assert sp.find_knee(spiky, "target_qps")["value"] == 80
    assert sp.max_valid(aggs) == 40
    # the concurrency axis: a flat end is the knee; the first value near the best throughput is named
    conc = [_agg(1, 1), _agg(2, 1.9), _agg(4, 3.0), _agg(8, 3.1)]
    assert sp.find_knee(conc, "concurrency")["value"] == 4
    assert sp.find_knee(conc[:3], "concurrency") is None


def test_repeats_aggregate_min_median_max():
    points = [{"value": 8, "repeat": r, "valid": r != 2, "throughput": x, "latency_ms": {"p99": 10.0 * r},
               "tokens_per_s": None, "goodput": None} for r, x in ((1, 5.0), (2, 9.0), (3, 6.0))]
    (agg,) = sp.by_value(points)
    assert agg["repeats"] == 3 and agg["valid"] is False  # VALID only when every repeat was
    assert agg["throughput"] == {"min": 5.0, "median": 6.0, "max": 9.0}
    assert agg["latency_p99_ms"] == {"min": 10.0, "median": 20.0, "max": 30.0}
    assert agg["goodput"] is None


def test_bad_options_are_refused_before_any_run(tmp_path, env):
    out = tmp_path / "never"
    for args, words in ((["--qps", "10", "--slo", "ttft_p99=1s"], "does not stream tokens"),
                        (["--concurrency", "2"], "not a generative model"),
                        (["--plan", "even"], "needs --min-qps and --max-qps"),
                        (["--qps", "10", "--slo", "latency_p99=5"], "needs a unit"),
                        (["--scenario", "Offline", "--qps", "10"], "Server or Interactive")):
        proc = cli("sweep", "--manifest", "demo", *args, "--output", str(out), env=env, timeout=60)
        assert proc.returncode != 0 and words in proc.stderr, (args, proc.stderr)
        assert not out.exists()


def test_a_sweep_without_range_starts_at_the_calibrated_rate(tmp_path, env):
    """No --min-qps/--max-qps: the first run calibrates its rate, the sweep doubles from it (demo model)."""
    out = tmp_path / "auto"
    proc = cli("sweep", "--manifest", "demo", "--min-duration-ms", "200", "--points", "3", "--output", str(out),
               env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    state = json.loads((out / "sweep.json").read_text())
    first = next(p for p in state["points"] if p["value"] == state["range"]["min"])  # the points sort by value
    meta = json.loads((out / first["dir"] / "mlharness_run.json").read_text())
    assert meta["calibration"]["calibrated"] is True
    assert first["value"] == pytest.approx(meta["settings"]["server_target_qps"], abs=1e-3)
    start = state["range"]["min"]
    assert state["range"]["from"] == "calibration" and start == first["value"]
    assert state["range"]["max"] == pytest.approx(64 * start) and state["range"]["floor"] == pytest.approx(start / 64)
    values = [p["value"] for p in state["points"]]
    assert len(values) == 3 and start in values
    # the second value doubles the start when it kept up, or halves it when it was already past the knee
    assert any(v == pytest.approx(start * f, rel=1e-3) for v in values for f in (2, 0.5)), values
    assert all(start / 64 <= v <= start * 64 for v in values)
    assert not (out / "points" / "calibrating").exists()
    assert "the sweep's range: from" in proc.stderr


def test_the_adaptive_plan_halves_from_a_start_past_the_knee():
    step = lambda aggs: sp.adaptive_next(aggs, "target_qps", 100, 6400, 6, False, floor=100 / 64)  # noqa: E731
    assert step([]) == 100
    assert step([_agg(100, 60, 50.0, ok=False)]) == 50  # the calibrated rate broke its bound: bracket below
    assert step([_agg(50, 40, 40.0, ok=False), _agg(100, 60, 50.0, ok=False)]) == 25
    # kept at 25, broken at 50: bisection between them
    assert step([_agg(25, 25), _agg(50, 40, 40.0, ok=False), _agg(100, 60, 50.0, ok=False)]) == pytest.approx(35.355)
    # no floor (a range given): no halving below --min-qps; a bound broken without a knee is confirmed above
    assert sp.adaptive_next([_agg(100, 60, 50.0, ok=False)], "target_qps", 100, 6400, 6, False) is None
    assert sp.adaptive_next([_agg(100, 100, 1.0, ok=False)], "target_qps", 100, 6400, 6, False) == 200


def test_short_points_are_never_the_knee_nor_the_highest_valid():
    aggs = [_agg(10, 10), _agg(20, 20), _agg(40, 10, 50.0)]
    assert sp.find_knee(aggs, "target_qps")["value"] == 40 and sp.max_valid(aggs) == 40
    points = [{"value": a["value"], "repeat": 1, "valid": True, "throughput": a["throughput"]["median"],
               "latency_ms": {"p99": a["latency_p99_ms"]["median"]}, "tokens_per_s": None, "goodput": None,
               "meaningful": a["value"] != 40} for a in aggs]
    short = sp.by_value(points)
    assert [a["meaningful"] for a in short] == [True, True, False]
    assert sp.find_knee(short, "target_qps") is None and sp.max_valid(short) == 20


def test_a_sweep_of_short_points_names_no_knee(tmp_path, env):
    """50 queries a point (under the rules' 700): 100,000 QPS is far past what the demo model follows, yet the
    sweep names no knee from it, and says why."""
    out = tmp_path / "short"
    proc = cli("sweep", "--manifest", "demo", "--qps", "200,100000", "--min-query-count", "50", "--min-duration-ms",
               "1", "--output", str(out), env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    state = json.loads((out / "sweep.json").read_text())
    assert all(50 <= p["samples"] < 700 for p in state["points"]), state["points"]
    assert all(p["meaningful"] is False and p["min_queries"] == 700 for p in state["points"])
    assert [a["meaningful"] for a in state["aggregates"]] == [False, False]
    assert state["knee"] is None and state["max_valid"] is None
    # the same figures read as long enough would name the point the demo could not follow
    assert sp.find_knee([{**a, "meaningful": True} for a in state["aggregates"]], "target_qps")["value"] == 100000
    assert "no: too few queries" in proc.stdout and "knee: not reached" in proc.stdout
    assert "not meaningful" in proc.stdout
