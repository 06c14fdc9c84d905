"""``mlharness report`` over a results directory of real demo runs: the Markdown table carries LoadGen's
numbers verbatim, the HTML page is self-contained and opens in headless Chromium without a console message,
INVALID and non-submittable runs say why, accuracy is judged against the MLPerf targets, and --compare gives
ratios."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mlharness.loadgen.rundir import parse_summary
from mlharness.report.collect import find_runs, target_for

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
                 if Path(p).exists()), None) or shutil.which("chromium")
DEMO = ("--count", "64", "--no-progress", "--telemetry-interval-ms", "50")
PERF = ("--mode", "performance", "--min-duration-ms", "300", "--min-query-count", "16")


def _summary_fields(path: Path, scenario: str) -> dict[str, str]:
    """LoadGen's summary read by the run's own reader (rundir), not by the report's parser under test."""
    return parse_summary(path, scenario).fields


@pytest.fixture(scope="module")
def results(tmp_path_factory, shared_cache) -> Path:
    """Six demo runs: Offline at two batch sizes (one traced), SingleStream, Server, accuracy, and an INVALID
    MultiStream run."""
    import os
    import sys

    root = tmp_path_factory.mktemp("results")
    env = {**os.environ, "MLHARNESS_CACHE": str(shared_cache)}
    runs = {
        "sys/demo/Offline/performance/run_1": ("--scenario", "Offline", *PERF, "--target-qps", "3000",
                                               "--max-batchsize", "32", "--trace", "model"),
        "sys-b8/demo/Offline/performance/run_1": ("--scenario", "Offline", *PERF, "--target-qps", "3000",
                                                  "--max-batchsize", "8"),
        "sys/demo/SingleStream/performance/run_1": ("--scenario", "SingleStream", *PERF,
                                                    "--target-latency-ms", "0.5"),
        "sys/demo/Server/performance/run_1": ("--scenario", "Server", *PERF, "--target-qps", "100"),
        "sys/demo/Offline/accuracy": ("--scenario", "Offline", "--mode", "accuracy"),
        # far too few queries for 2 s: LoadGen says INVALID and why
        "sys/demo/MultiStream/performance/run_1": ("--scenario", "MultiStream", "--mode", "performance",
                                                   "--min-duration-ms", "2000", "--target-latency-ms", "50"),
    }
    for rel, args in runs.items():
        proc = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", *args, *DEMO, "--output",
                               str(root / rel)], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
    (root / "sys" / "demo" / "Offline" / ".run_2.partial-x").mkdir()  # a staging folder is not a run
    return root


def _md_rows(md: str, header_start: str) -> list[dict[str, str]]:
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")), strict=True)))
    return rows


@pytest.mark.slow
def test_markdown_numbers_equal_loadgen_summaries(run_cli, results, tmp_path):
    md_path = tmp_path / "report.md"
    proc = run_cli("report", str(results), "--md", str(md_path))
    assert proc.returncode == 0, proc.stderr
    md = md_path.read_text()
    rows = _md_rows(md, "| run |")
    summaries = sorted(p for p in results.rglob("mlperf_log_summary.txt") if ".partial" not in str(p))
    assert sorted(r["run"] for r in rows) == sorted(str(p.parent.relative_to(results)) for p in summaries)
    checked = 0
    for r in rows:
        meta = json.loads((results / r["run"] / "mlharness_run.json").read_text())
        fields = _summary_fields(results / r["run"] / "mlperf_log_summary.txt", meta["scenario"])
        assert r["scenario"] == meta["scenario"] and r["mode"] == meta["mode"]
        assert r["batch"] == str(meta["batching"]["max_batchsize"])
        if r["mode"] == "performance":
            metric = next(k for k in fields if k.replace(" (ns)", "") == r["metric"])
            value, unit = r["value"].split(" ", 1)
            if unit == "ms":  # a latency metric: LoadGen's ns in ms, with separators
                assert value == f"{int(fields[metric]) / 1e6:,.3f}" and metric.endswith("(ns)")
            else:
                assert unit == "samples/s" and value == f"{float(fields[metric]):,.2f}"
            assert r["result"] == fields["Result is"]
            for p in ("50", "90", "99"):
                assert r[f"p{p} (ms)"] == f"{int(fields[f'{p}.00 percentile latency (ns)']) / 1e6:,.3f}"
            # the metric is the number mlharness reported for the run
            assert float(fields[metric]) == meta["result"]["metric_value"]
            checked += 1
        else:  # the metric's name beside its value; the demo has no MLPerf target, and says so
            assert r["accuracy"] == f"{meta['accuracy']['name']} = {meta['accuracy']['value']:.5g}" == "top1 = 100"
            assert r["target"] == "no MLPerf target"
        assert r["submittable"] == f"no ({len(meta['not_submittable_reasons'])})"
    assert checked == 5
    # why the INVALID run is INVALID, in LoadGen's words, and why none is submittable
    ms = md.split("## sys/demo/MultiStream/performance/run_1", 1)[1].split("\n## ", 1)[0]
    fields = _summary_fields(results / "sys/demo/MultiStream/performance/run_1/mlperf_log_summary.txt",
                             "MultiStream")
    assert fields["Result is"] == "INVALID"
    failed = [k for k, v in fields.items() if "satisfied" in k and v.lower() != "yes"]
    assert failed and all(f"{k}: {fields[k]}" in ms for k in failed)
    assert "not submittable: --count 64 limits the dataset" in ms
    assert "telemetry: process CPU %" in md and "stages (total ms): " in md


@pytest.mark.slow
def test_html_is_self_contained_and_opens_cleanly(run_cli, results, tmp_path):
    html_path = tmp_path / "report.html"
    proc = run_cli("report", str(results), "--html", str(html_path))
    assert proc.returncode == 0, proc.stderr
    html = html_path.read_text()
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", html), "external resource in the page"
    assert not re.findall(r"http://(?!www.w3.org/)", html)  # SVG namespaces only
    # latency percentiles, throughput vs batch size (8 and 32), stage breakdown (traced run), CPU over time
    # (and GPU utilisation on a host with NVML and GPUs)
    for caption in ("Latency percentiles", "Throughput of runs", "Time per stage", "CPU utilisation"):
        assert f"<figcaption>{caption}" in html
    figures = html.count("<svg")
    assert figures == html.count("<figcaption>") >= 4
    assert ">sys/<wbr>demo/<wbr>MultiStream/<wbr>performance/<wbr>run_1<" in html
    assert '<td class="FAIL long">INVALID</td>' in html
    # the host and its GPUs once, at the top, not once per run
    assert html.count("GPUs: ") == 1 and html.index("GPUs: ") < html.index("<h2>Runs</h2>")
    assert not re.findall(r">\d{7,}<", html)  # no raw nanosecond counts
    if CHROMIUM is None:
        pytest.skip("no chromium binary")
    # the detector itself must see a console error on a page that has one
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body><p>x</p>'
                   "<script>undefined_function();</script></body></html>")
    dom, console = _chromium(bad, tmp_path / "profile-bad")
    assert any("undefined_function" in line for line in console), console
    dom, console = _chromium(html_path, tmp_path / "profile")
    assert console == []
    assert dom.count("<svg") == figures and dom.count("<tr>") >= 7


def _chromium(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM Chromium built and every console message it logged (the page has no script, so any message is
    an error: a failed resource, a parse error, a script that should not be there)."""
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return proc.stdout, console


@pytest.mark.slow
def test_compare_gives_ratios(run_cli, results, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(results / "sys", other / "sys")
    summary = other / "sys/demo/Server/performance/run_1/mlperf_log_summary.txt"
    value = _summary_fields(summary, "Server")["Completed samples per second"]
    summary.write_text(summary.read_text().replace(f": {value}", f": {float(value) * 2:.2f}", 1))
    md_path = tmp_path / "cmp.md"
    proc = run_cli("report", str(results), "--compare", str(other), "--md", str(md_path))
    assert proc.returncode == 0, proc.stderr
    rows = {r["run"]: r for r in _md_rows(md_path.read_text(), "| run | other run |")}
    server = rows["sys/demo/Server/performance/run_1"]
    assert server["value"] == f"{float(value):,.2f} samples/s"
    assert float(server["other value"].split()[0].replace(",", "")) == pytest.approx(2 * float(value), abs=0.01)
    assert float(server["other / this"]) == pytest.approx(2.0, abs=2e-3)
    assert rows["sys/demo/Offline/accuracy"]["other / this"] == "1.000"
    assert "only in" in md_path.read_text() and "sys-b8/demo/Offline/performance/run_1" in md_path.read_text()
    assert "compared with" in proc.stdout


def test_accuracy_targets(tmp_path):
    run = tmp_path / "res" / "sys" / "resnet" / "Offline" / "accuracy"
    run.mkdir(parents=True)
    (run / "mlperf_log_summary.txt").write_text("No warnings encountered during test.\n")
    (run / "accuracy.txt").write_text("accuracy=76.000%, good=38000, total=50000\n")
    (runs, skipped) = find_runs(tmp_path / "res")
    assert not skipped and runs[0].accuracy_value == 76.0 and runs[0].mode == "accuracy"
    assert runs[0].accuracy_status() == [("≥ 75.695 (99% of 76.46)", True)]
    bert = target_for({"conf_model": "bert", "benchmark": "bert-99.9"}, "x")
    assert bert.thresholds() == [(0.999, pytest.approx(90.874 * 0.999))]
    unet = target_for(None, "sys/3d-unet-99/Offline/accuracy")
    assert unet.thresholds() == [(0.99, pytest.approx(0.86170 * 0.99))]
    assert len(target_for({"conf_model": "3d-unet", "benchmark": "3d-unet-random"}, "x").thresholds()) == 2
    assert target_for({"conf_model": "demo", "benchmark": "demo"}, "sys/demo/Offline/accuracy") is None
    # the checker's closed-division targets for the rest: the LLMs' primary figure
    llama = target_for({"conf_model": "llama3_1-8b", "benchmark": "llama3.1-8b"}, "x")
    assert (llama.metric, llama.thresholds()) == ("ROUGE1", [(1.0, pytest.approx(38.7792 * 0.99))])


def test_layers_needs_a_framework_trace(run_cli, tmp_path):
    trace = tmp_path / "mlharness_trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"name": "predict", "cat": "model", "ph": "X", "ts": 0,
                                                  "dur": 5, "pid": 1, "tid": 1}]}))
    proc = run_cli("report", "layers", str(trace))
    assert proc.returncode == 2 and "--trace framework" in proc.stderr
    proc = run_cli("report", str(tmp_path))
    assert proc.returncode == 2 and "no runs under" in proc.stderr


FIXTURES = Path(__file__).parent / "fixtures" / "report_test04"


def test_verdict_of_the_official_test04_output(tmp_path):
    """tests/fixtures/report_test04: the summaries of a performance run and of the TEST04 run of a SUT that
    caches answers, and what compliance/TEST04/verify_performance.py -r reference_summary.txt -t test_summary.txt
    printed for them. The report reads the official output and mlharness's own (for the same summaries) alike."""
    from mlharness.report.verdicts import find_verdicts, parse_verify
    from mlharness.submission.compliance_perf import test04_performance

    official = (FIXTURES / "official_verify_performance.txt").read_text()
    passed, line, numbers = parse_verify(official)
    ref = float(re.search(r"reference score = (\S+)", official).group(1))
    test = float(re.search(r"test score = (\S+)", official).group(1))
    assert (passed, line) == (False, "TEST FAIL: Test score invalid")
    assert numbers[0] == f"test score {test:,.2f} vs reference {ref:,.2f} ({(test / ref - 1) * 100:+.1f}%)"
    ok, lines, _ = test04_performance(FIXTURES / "reference_summary.txt", FIXTURES / "test_summary.txt")
    own = parse_verify("\n".join(lines) + "\n")
    assert own[0] is ok is False and own[2][0].startswith(numbers[0] + "; scores in queries per second")
    # a verify file of a scenario's TESTnn folder is found and named by its place in the tree
    t04 = tmp_path / "sys" / "resnet" / "SingleStream" / "TEST04"
    t04.mkdir(parents=True)
    (t04 / "verify_performance.txt").write_text(official)
    (v,) = find_verdicts(tmp_path)
    assert (v.benchmark, v.scenario, v.test, v.check, v.label) == ("resnet", "SingleStream", "TEST04",
                                                                 "performance", "FAIL")
    assert v.summary().startswith("TEST04 performance FAIL: TEST FAIL: Test score invalid; test score")


def test_verdict_of_test06_words():
    from mlharness.report.verdicts import parse_verify
    from mlharness.submission.test06 import Test06Result

    failed = Test06Result(first_token=True, eos=False, length=True, problems=[]).text()
    passed, line, numbers = parse_verify(failed)
    assert (passed, line) == (False, "TEST06 verification failed")
    assert numbers[0] == "EOS check pass = False"  # the failing check first
    assert parse_verify(Test06Result(None, True, True, []).text())[0] is True
    assert parse_verify("nothing decided here\n")[0] is None
