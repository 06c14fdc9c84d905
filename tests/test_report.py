"""``mlharness report`` over a results directory of real demo runs: the Markdown table carries LoadGen's
numbers verbatim, the HTML page is self-contained and opens in headless Chromium without a console message,
INVALID and non-submittable runs say why, accuracy is judged against the MLPerf targets, and --compare gives
ratios."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape as html_unescape
from pathlib import Path

import pytest

from mlharness.loadgen.logs import parse_summary
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
        # Offline's one query is sized from the stated rate: a rate above what a quiet host reaches keeps the run
        # long enough for several telemetry samples (3000 ended one within a sample or two, and its CPU figure
        # went missing)
        "sys/demo/Offline/performance/run_1": ("--scenario", "Offline", *PERF, "--target-qps", "10000",
                                               "--max-batchsize", "32", "--trace", "model"),
        "sys-b8/demo/Offline/performance/run_1": ("--scenario", "Offline", *PERF, "--target-qps", "10000",
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
        else:  # the metric's own name and direction beside its value; the demo has no MLPerf target, and says so
            assert meta["accuracy"]["value"] == 100.0 and r["accuracy"] == "top-1 100% (higher is better)"
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
    # a reason every run shares is said once, above the table, not once per run
    assert md.count("not submittable: --count 64 limits the dataset") == 1
    assert md.index("Every run:\n\n- not submittable: --count 64") < md.index("| run |")
    assert "--count 64" not in ms and "not submittable: min_duration is 2000 ms" in ms  # its own settings
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
    # one section of figures per benchmark and scenario: the Offline results (no latency percentiles: an
    # Offline latency is no response time), throughput vs batch size (8 and 32), stage breakdown (traced run),
    # latency percentiles of the other scenarios, CPU over time (and GPU utilisation on a host with NVML)
    sections = dict(re.findall(r'<section class="group" data-benchmark="demo" data-scenario="(\w+)">(.*?)'
                               r"</section>", html, re.S))
    assert sorted(sections) == ["MultiStream", "Offline", "Server", "SingleStream"]
    for caption in ("the result of each Offline", "throughput of runs", "time per stage", "CPU utilisation"):
        assert f"<figcaption>demo Offline: {caption}" in sections["Offline"]
    assert ": latency percentiles" not in sections["Offline"]  # neither a caption nor an SVG title says it
    for scenario in ("MultiStream", "Server", "SingleStream"):
        assert f"<figcaption>demo {scenario}: latency percentiles" in sections[scenario]
        assert f"demo {scenario}: CPU utilisation" in sections[scenario]
    figures = html.count("<svg")
    assert figures == html.count("<figcaption>") >= 9
    assert ">sys/<wbr>demo/<wbr>MultiStream/<wbr>performance/<wbr>run_1<" in html
    assert '<td class="FAIL">INVALID</td>' in html
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
    assert dom.count("<svg") == figures and dom.count("<tr") >= 7


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


OFFICIAL = Path(__file__).parent / "fixtures"


def _accuracy_run(root: Path, benchmark: str, text: str, accuracy: dict | None = None,
                  not_submittable: tuple[str, ...] = ()) -> str:
    """An accuracy run folder: LoadGen's summary of an accuracy run, accuracy.txt as the official script printed
    it, and mlharness's metadata with the figure mlharness recorded."""
    rel = f"sys/{benchmark}/Offline/accuracy"
    run = root / rel
    run.mkdir(parents=True)
    (run / "mlperf_log_summary.txt").write_text("No warnings encountered during test.\n")
    (run / "accuracy.txt").write_text(text)
    (run / "mlharness_run.json").write_text(json.dumps({
        "benchmark": benchmark, "scenario": "Offline", "mode": "accuracy", "accuracy": accuracy,
        "not_submittable_reasons": list(not_submittable)}))
    return rel


def _glance_rows(page: str) -> dict[str, dict[str, str]]:
    """The runs table of the HTML page: run -> column -> the cell's text (the details toggle left out)."""
    table = re.search(r'<table class="glance"><thead><tr>(.*?)</tr></thead><tbody>(.*?)</tbody>', page, re.S)
    heads = re.findall(r"<th>(.*?)</th>", table.group(1))
    rows = {}
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(2), re.S):
        cells = [re.sub(r"<[^>]+>", " ", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        cells = [" ".join(html_unescape(c).split()) for c in cells]
        rows[cells[0].replace(" ", "")] = dict(zip(heads, cells, strict=True))
    return rows


def test_accuracy_shown_under_its_metric_name(tmp_path):
    """WER as WER (lower is better), never as the -1739.4 'accuracy' of a WER of 1839.4%; an image-generation
    run shows FID and CLIP, each with its direction; texts as the official scripts print them."""
    from mlharness.report import html, render
    from mlharness.submission.rules import ACC_PATTERNS
    from mlharness.tasks.librispeech.metric import result_line

    root = tmp_path / "res"
    wer = _accuracy_run(root, "whisper", result_line(18.394), {"name": "accuracy", "value": (1 - 18.394) * 100})
    official_wer = _accuracy_run(root, "speech-ctc", (OFFICIAL / "librispeech" / "official_output.txt").read_text())
    sdxl_text = (OFFICIAL / "coco_t2i" / "official_output.txt").read_text()
    sdxl = _accuracy_run(root, "stable-diffusion-xl", sdxl_text, {"name": "CLIP_SCORE", "value": 4.098})
    squad = _accuracy_run(root, "qa", '{"exact_match": 50.0, "f1": 66.667}\n', {"name": "exact_match", "value": 50.0})
    report = render.build(root)
    page = html.render(report)
    rows = _glance_rows(page)
    assert rows[wer]["accuracy"].startswith("WER 1,839.4% (lower is better)")
    assert rows[official_wer]["accuracy"] == "WER 20.238% (lower is better)"
    fid = float(re.match(ACC_PATTERNS["FID_SCORE"], sdxl_text).group(1))  # the checker's reading of the text
    clip = float(re.match(ACC_PATTERNS["CLIP_SCORE"], sdxl_text).group(1))
    assert rows[sdxl]["accuracy"].startswith(f"FID {fid:,.1f} (lower is better); CLIP {clip:,.5g} (higher is "
                                             "better)")
    assert rows[squad]["accuracy"] == "exact match 50 (higher is better); F1 66.667 (higher is better)"
    # a target the run misses is said in the row (the checker's whisper target is on accuracy = 100 - WER)
    assert rows[wer]["accuracy"].endswith("target MISSED")
    assert "1739" not in page and "1,739" not in page
    md = render.markdown(report)
    assert "| WER 1,839.4% (lower is better) |" in md and "accuracy = " not in md


def test_notes_shared_by_runs_are_said_once(tmp_path):
    from mlharness.report import html, render

    root = tmp_path / "res"
    common = ("--count 64 limits the dataset", "the manifest names no MLPerf benchmark")
    for name in ("a", "b", "c"):
        extra = ("accuracy of a subset",) if name == "c" else ()
        _accuracy_run(root, name, "accuracy=76.000%, good=38, total=50\n", None, common + extra)
    report = render.build(root)
    page = html.render(report)
    outside = re.sub(r"<details>.*?</details>", "", page, flags=re.S)  # each row's toggle holds all its notes
    for reason in common:
        assert outside.count(f"<li>not submittable: {reason}</li>") == 1
        assert outside.index(f"<li>not submittable: {reason}</li>") < outside.index('<table class="glance">')
    assert "<p>Every run:</p>" in outside
    # what only one run has is said in that run's own section, and nowhere else
    (section,) = re.findall(r'<section class="run"><h3>(.*?)</h3>(.*?)</section>', outside, re.S)
    assert section == ("sys/c/Offline/accuracy", "<ul><li>not submittable: accuracy of a subset</li></ul>")
    rows = _glance_rows(page)
    assert {r["submittable"] for r in rows.values()} == {"no (2)", "no (3)"}
    md = render.markdown(report)
    assert md.count("not submittable: --count 64 limits the dataset") == 1
    assert md.count("not submittable: accuracy of a subset") == 1
