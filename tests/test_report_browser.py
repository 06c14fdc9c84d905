"""``mlharness report`` as a reader sees it: a submission tree whose TEST04 fails (a SUT that caches answers,
caught by the real audit) and a load sweep over a generative model, each rendered by headless Chromium at 1280
and 1920 px. A script added to a copy of the page (the shipped page has none) measures every element after
layout: nothing may overflow unless it scrolls with a visible cue; verdicts, units and milliseconds must be on
the page and no raw nanosecond count."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlharness.paths import MANIFESTS_DIR
from mlharness.report.plots_sweep import pareto_front
from tests.test_report import OFFICIAL, _accuracy_run

pytestmark = pytest.mark.slow

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
                 if Path(p).exists()), None) or shutil.which("chromium")
SYSTEM = "testbox"
# a model that answers a sample seen before from a cache: TEST04 (one sample over and over) must fail
CACHER = """\
name: cacher
framework: {name: echo, options: {sleep_ms: 5}}
inputs: [{name: x, element_type: int64, shape: [1]}]
outputs: [{name: y, element_type: int64, shape: [1]}]
response: {element_type: bytes}
dataset:
  name: indices
  init: |
    def init(count):
        return 128
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      return np.array([index], dtype=np.int64)
predict: |
  import numpy as np

  CACHE = {}

  def predict(ctx, run, inputs):
      keys = [int(k) for k in inputs[0][:, 0]]
      if all(k in CACHE for k in keys):
          return [np.stack([CACHE[k] for k in keys])]
      out = run(inputs)[0]
      for k, row in zip(keys, out):
          CACHE[k] = row
      return [out]
postprocess: |
  def postprocess(ctx, outputs):
      return [b"label-%d" % i for i in outputs[0][:, 0]]
"""
# measures the laid-out page and writes the findings into it (the test's copy only)
PROBE = """<script>
const out = {overflow: [], sticky: [], page: {}};
const de = document.documentElement;
out.page = {scrollWidth: de.scrollWidth, clientWidth: de.clientWidth};
for (const el of document.querySelectorAll('body *')) {
  if (el.closest('svg') || el.clientWidth === 0) continue;
  if (el.scrollWidth > el.clientWidth + 1) {
    const cs = getComputedStyle(el);
    out.overflow.push({tag: el.tagName, cls: String(el.className), sw: el.scrollWidth, cw: el.clientWidth,
      ox: cs.overflowX, bg: cs.backgroundImage,
      bar: el.offsetHeight - el.clientHeight - parseFloat(cs.borderTopWidth) - parseFloat(cs.borderBottomWidth)});
  }
}
for (const th of document.querySelectorAll('.scroll th:first-child')) out.sticky.push(getComputedStyle(th).position);
out.text = document.body.innerText;
const pre = document.createElement('pre'); pre.id = 'findings'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""
# where each table's header cells and scroll container lie after layout (the test's copy only)
GEOMETRY = """<script>
const out = {vw: document.documentElement.clientWidth, tables: []};
for (const table of document.querySelectorAll('table')) {
  const box = table.parentElement.getBoundingClientRect();
  out.tables.push({left: box.left, right: box.right, sw: table.parentElement.scrollWidth,
    cw: table.parentElement.clientWidth, heads: [...table.querySelectorAll('thead th')].map(th => {
      const r = th.getBoundingClientRect(); return {text: th.textContent, left: r.left, right: r.right}; })});
}
const pre = document.createElement('pre'); pre.id = 'findings'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def _cli(env: dict[str, str], *args: str, umask: int = 0o022) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          env=env, timeout=180, preexec_fn=lambda: os.umask(umask))


@pytest.fixture(scope="module")
def trees(tmp_path_factory, env) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("report-browser")
    (work / "cacher.yaml").write_text(CACHER)
    results = work / "results"
    proc = _cli(env, "submission", "run", "--manifest", str(work / "cacher.yaml"), "--scenarios", "SingleStream",
                "--division", "open", "--submitter", "Acme", "--system-name", SYSTEM, "--results", str(results),
                "--extra-tests", "TEST04", "--min-duration-ms", "200", "--min-query-count", "64",
                "--target-latency-ms", "0.01")
    said = proc.stdout + proc.stderr  # a failed audit of a development run: exit 4, or 0 with the finding named
    assert (proc.returncode == 4 and "cacher/SingleStream TEST04 performance" in said) or \
        (proc.returncode == 0 and "FAIL (development)" in said), said
    proc = _cli(env, "submission", "package", "--results", str(results), "--out", str(work / "package"))
    assert proc.returncode == 0, proc.stderr
    # a sweep: one point is a real generative run (the token oracle, slowed to give real TTFT / TPOT)
    oracle = yaml.safe_load((MANIFESTS_DIR / "llama3.1-8b" / "llama3.1-8b-oracle.yaml").read_text())
    oracle["framework"]["options"].update(first_token_delay_ms=4, token_delay_ms=0.3)
    (work / "oracle.yaml").write_text(yaml.safe_dump(oracle, sort_keys=False))
    sweep = work / "sweep"
    proc = _cli(env, "run", "--manifest", str(work / "oracle.yaml"), "--scenario", "Server", "--mode",
                "performance", "--count", "16", "--min-duration-ms", "300", "--min-query-count", "16",
                "--target-qps", "40", "--no-progress", "--output", str(sweep / "qps-40"))
    assert proc.returncode == 0, proc.stderr
    points = []
    for i, (qps, thr, p99, valid) in enumerate(((10, 9.9, 30.0, True), (20, 19.7, 41.0, True), (40, 38.0, 90.0, True),
                                                (80, 52.0, 900.0, False), (160, 50.5, 4000.0, False))):
        lat = {"p50": p99 / 3, "p90": p99 / 1.5, "p95": p99 / 1.2, "p99": p99, "p99.9": p99 * 1.1}
        points.append({"label": f"qps-{qps}", "value": qps, "repeat": 1, "dir": f"qps-{qps}", "valid": valid,
                       "invalid_reasons": [] if valid else ["TTFT p99 over 2000 ms"], "throughput": thr,
                       "latency_ms": lat, "ttft_ms": {"p99": p99 / 2}, "tpot_ms": {"p99": 0.9 + i},
                       "tokens_per_s": thr * 60, "tokens_per_s_per_user": 600.0 / (i + 1) - (30 if i == 1 else 0),
                       "goodput": thr * (1.0 if valid else 0.2), "goodput_fraction": 1.0 if valid else 0.2})
    (sweep / "sweep.json").write_text(json.dumps({
        "kind": "mlharness-sweep", "version": 1, "manifest": "llama3.1-8b-oracle", "scenario": "Server",
        "axis": "target_qps", "slo": {"ttft": 2.0, "tpot": 0.1}, "plan": [p["value"] for p in points],
        "points": points, "knee": {"value": 40, "reason": "p99 latency grows 10x beyond"}, "max_valid": 40}))
    return {"results": results, "package": work / "package", "sweep": sweep}


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


def _report(env, path: Path, out: Path, umask: int = 0o022) -> tuple[str, str]:
    proc = _cli(env, "report", str(path), "--html", str(out.with_suffix(".html")), "--md", str(out.with_suffix(".md")),
                umask=umask)
    assert proc.returncode == 0, proc.stderr
    return out.with_suffix(".md").read_text(), proc.stdout


def test_failed_test04_shows_failed_with_its_numbers(env, trees, tmp_path):
    for name in ("results", "package"):
        md, stdout = _report(env, trees[name], tmp_path / name)
        verify = next(trees[name].rglob("TEST04/verify_performance.txt")).read_text()
        ref = float(re.search(r"reference score = (\S+)", verify).group(1))
        test = float(re.search(r"test score = (\S+)", verify).group(1))
        verdicts = {(r["test"], r["check"]): r for r in _md_rows(md, "| benchmark | scenario | test | check |")}
        t04 = verdicts[("TEST04", "performance")]
        assert t04["verdict"] == "FAIL" and t04["benchmark"] == "cacher" and t04["scenario"] == "SingleStream"
        assert f"test score {test:,.2f} vs reference {ref:,.2f} ({(test / ref - 1) * 100:+.1f}%)" in t04["numbers"]
        assert "20% or more faster" in t04["numbers"]  # the rule, with the SingleStream tolerance
        assert verdicts[("TEST01", "accuracy")]["verdict"] == "PASS"
        runs = {r["run"]: r for r in _md_rows(md, "| run |")}
        for rel, r in runs.items():
            summary = (trees[name] / rel / "mlperf_log_summary.txt").read_text()
            assert r["benchmark"] == "cacher", r  # never the scenario, also for TEST01/TEST04 rows
            assert r["scenario"] == "SingleStream"
            assert r["test"] == next((p for p in Path(rel).parts if p.startswith("TEST")), "")
            if r["mode"] == "performance":
                p99 = int(re.search(r"99.00 percentile latency \(ns\)\s*: (\d+)", summary).group(1))
                assert r["p99 (ms)"] == f"{p99 / 1e6:,.3f}"
                assert r["value"].endswith(" ms") and "(ns)" not in r["metric"]
        t04_run = next(r for rel, r in runs.items() if r["test"] == "TEST04")
        assert t04_run["result"] == "VALID run, TEST04 performance FAIL"
        assert t04_run["compliance"] == (f"TEST04 performance FAIL (test score {test:,.2f} vs reference {ref:,.2f} "
                                         f"({(test / ref - 1) * 100:+.1f}%))")
        assert "TEST04 performance FAIL" in stdout
        if name == "package":  # a package carries no run metadata: its system description says what ran
            assert re.search(r"^- system testbox: 1x .* \(\d+ cores\), ", md, re.M)


def test_report_files_follow_the_umask(env, trees, tmp_path):
    for mask, mode in ((0o022, 0o644), (0o027, 0o640)):
        _report(env, trees["package"], tmp_path / f"r{mask:o}", umask=mask)
        for suffix in (".html", ".md"):
            assert stat.S_IMODE((tmp_path / f"r{mask:o}").with_suffix(suffix).stat().st_mode) == mode


def test_sweep_report(env, trees, tmp_path):
    md, _ = _report(env, trees["sweep"], tmp_path / "sweep")
    rows = _md_rows(md, "| point |")
    assert [r["offered"] for r in rows] == ["10.00", "20.00", "40.00", "80.00", "160.00"]
    assert rows[2]["result"] == "VALID (knee)" and rows[3]["result"] == "INVALID"
    assert rows[3]["why INVALID"] == "TTFT p99 over 2000 ms" and rows[4]["goodput (samples/s)"] == "10.10 (20%)"
    assert "knee at 40.00: p99 latency grows 10x beyond" in md and "SLO: ttft ≤ 2,000.0 ms" in md
    # the real run of a point is reported as a run, with its token latencies
    runs = {r["run"]: r for r in _md_rows(md, "| run |")}
    assert runs["qps-40"]["value"].endswith(" tokens/s")
    summary = (trees["sweep"] / "qps-40" / "mlperf_log_summary.txt").read_text()
    (tokens,) = _md_rows(md, "| run | scenario | tokens/s |")
    for kind, line in (("TTFT", "first token latency"), ("TPOT", "time to output token")):
        for p in ("50", "90", "99"):
            ns = int(re.search(rf"{p}.00 percentile {line} \(ns\)\s*: (\d+)", summary).group(1))
            assert tokens[f"{kind} p{p} (ms)"] == f"{ns / 1e6:,.3f}"
    assert (tokens["TTFT limit (ms)"], tokens["TPOT limit (ms)"]) == ("2,000.000", "100.000")  # mlperf.conf's
    page = (tmp_path / "sweep.html").read_text()
    for caption in ("Latency percentiles against throughput", "Tokens/s per user against tokens/s",
                    "Goodput (completions"):
        assert f"<figcaption>{caption}" in page
    assert re.search(r"<figcaption>[^<]*: time to first token and time per output token", page)
    assert "<script" not in page.lower() and "Token latencies" in page
    # the sweep.json alone, without any run folder, is a report too
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(trees["sweep"] / "sweep.json", alone / "sweep.json")
    md, _ = _report(env, alone / "sweep.json", tmp_path / "alone-report")
    assert len(_md_rows(md, "| point |")) == 5 and "| run | benchmark |" not in md
    bad = tmp_path / "bad" / "sweep.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"kind": "mlharness-sweep", "version": 1, "axis": "target_qps",
                               "points": [{"value": "fast"}]}))
    proc = _cli(env, "report", str(bad.parent), "--md", str(tmp_path / "bad.md"))
    assert proc.returncode == 2 and "field 'points[0].value' is a string, expected a number" in proc.stderr


def test_pareto_front():
    pts = [(100.0, 50.0), (200.0, 40.0), (150.0, 30.0), (300.0, 10.0), (90.0, 45.0)]
    assert pareto_front(pts) == [(100.0, 50.0), (200.0, 40.0), (300.0, 10.0)]


def _layout(page: Path, width: int, tmp: Path, script: str = PROBE) -> dict:
    probe = tmp / f"{page.stem}-{width}.html"
    probe.write_text(page.read_text().replace("</body>", script + "</body>"))
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
         f"--window-size={width},1000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="findings">(.*?)</pre>', proc.stdout, re.S)
    assert m, proc.stdout[-2000:]
    return json.loads(html.unescape(m.group(1)))


def _hidden_overflow(found: dict) -> list[dict]:
    """Overflowing elements a reader could not scroll to, or that scroll without a visible cue."""
    return [o for o in found["overflow"] if o["ox"] not in ("auto", "scroll") or "gradient" not in o["bg"]
            or o["bar"] <= 0]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary")
def test_pages_fit_the_window_or_scroll_visibly(env, trees, tmp_path):
    # the probe itself: a table cut off by overflow: hidden is found
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><div style="overflow:hidden;width:300px"><table style="width:2000px">'
                   "<tr><td>x</td></tr></table></div></body></html>")
    assert _hidden_overflow(_layout(bad, 1280, tmp_path))
    _report(env, trees["package"], tmp_path / "package")
    _report(env, trees["sweep"], tmp_path / "sweep")
    for page in (tmp_path / "package.html", tmp_path / "sweep.html"):
        for width in (1280, 1920):
            found = _layout(page, width, tmp_path)
            assert found["page"]["scrollWidth"] <= found["page"]["clientWidth"], (page, width, found["page"])
            assert _hidden_overflow(found) == [], (page, width)
            assert found["sticky"] and set(found["sticky"]) == {"sticky"}
            text = found["text"]
            assert not re.findall(r"\b\d{7,}\b", text), "a raw nanosecond count on the page"
            assert " ms" in text and ("p99 vs bound" if page.stem == "package" else "p99 (ms)") in text
            if page.stem == "package":
                assert "TEST04" in text and "FAIL" in text and "VALID run, TEST04 performance FAIL" in text
                assert "20% or more faster" in text
            else:
                assert "samples/s" in text and "tokens/s" in text and "VALID (knee)" in text
    # in a narrow window the runs table scrolls, with the cue: checked on a real case
    narrow = _layout(tmp_path / "package.html", 640, tmp_path)
    assert narrow["overflow"] and _hidden_overflow(narrow) == []


def test_report_of_a_real_sweep(env, tmp_path):
    """`mlharness sweep` over the demo (two offered loads), then the report of its folder: one sweep row per
    point, the same numbers as each point's run, which is reported too."""
    out = tmp_path / "sweep"
    proc = _cli(env, "sweep", "--manifest", "demo", "--scenario", "Server", "--qps", "50,400", "--min-duration-ms",
                "300", "--slo", "latency_p99=20ms", "--count", "64", "--min-query-count", "10", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    state = json.loads((out / "sweep.json").read_text())
    md, stdout = _report(env, out, tmp_path / "report")
    points = _md_rows(md, "| point |")
    runs = {r["run"]: r for r in _md_rows(md, "| run | benchmark |")}
    assert [p["point"] for p in points] == [p["label"] for p in state["points"]] and len(points) == 2
    for row, point in zip(points, state["points"], strict=True):
        summary = (out / point["dir"] / "mlperf_log_summary.txt").read_text()
        p99 = int(re.search(r"99.00 percentile latency \(ns\)\s*: (\d+)", summary).group(1))
        assert row["p99 (ms)"] == runs[point["dir"]]["p99 (ms)"] == f"{p99 / 1e6:,.3f}"
        assert row["throughput"] == runs[point["dir"]]["value"] == f"{point['throughput']:,.2f} samples/s"
        assert row["goodput (samples/s)"] == f"{point['goodput']:,.2f} ({100 * point['goodput_fraction']:.0f}%)"
        knee = state["knee"] is not None and point["value"] == state["knee"]["value"]
        assert row["result"] == ("VALID" if point["valid"] else "INVALID") + (" (knee)" if knee else "")
    assert "SLO: latency_p99 ≤ 20.0 ms" in md and "sweep " in stdout
    page = (tmp_path / "report.html").read_text()
    assert "<figcaption>Latency percentiles against throughput" in page
    assert "<figcaption>Goodput (completions" in page


@pytest.fixture(scope="module")
def mixed(trees, tmp_path_factory) -> Path:
    """One tree of two models in two scenarios: the submission tree of the cacher (SingleStream, its TEST01 and
    TEST04 runs), the sweep over the token oracle (Server) with its real point run, and accuracy runs of a
    speech model (WER) and an image generator (FID and CLIP), as their official scripts print them."""
    root = tmp_path_factory.mktemp("mixed")
    shutil.copytree(trees["sweep"], root, dirs_exist_ok=True)
    shutil.copytree(trees["results"], root / "results")
    _accuracy_run(root, "whisper", (OFFICIAL / "librispeech" / "official_output.txt").read_text(),
                  {"name": "accuracy", "value": 79.76}, ("--count 16 limits the dataset",))
    _accuracy_run(root, "stable-diffusion-xl", (OFFICIAL / "coco_t2i" / "official_output.txt").read_text(),
                  {"name": "CLIP_SCORE", "value": 4.098}, ("--count 16 limits the dataset",))
    return root


GLANCE = ("run", "benchmark", "scenario", "result", "metric", "p99 vs bound", "accuracy", "submittable")


def _in_view(table: dict, names: tuple[str, ...], vw: float) -> list[str]:
    """The header cells of ``names`` that a reader cannot see without scrolling sideways."""
    heads = {h["text"]: h for h in table["heads"]}
    right = min(vw, table["right"]) + 1
    return [n for n in names if n not in heads or heads[n]["right"] > right or heads[n]["left"] < table["left"] - 1]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary")
def test_the_runs_at_a_glance_at_1280_px(env, mixed, tmp_path):
    md, _ = _report(env, mixed, tmp_path / "mixed")
    page = tmp_path / "mixed.html"
    found = _layout(page, 1280, tmp_path, GEOMETRY)
    runs_table = next(t for t in found["tables"] if any(h["text"] == "submittable" for h in t["heads"]))
    sweep_table = next(t for t in found["tables"] if any(h["text"] == "why INVALID" for h in t["heads"]))
    # the runs table's columns and the sweep table's "why INVALID" are in the window, and neither table
    # scrolls sideways: what is not shown sits behind each row's toggle
    assert _in_view(runs_table, GLANCE, found["vw"]) == [], runs_table
    assert _in_view(sweep_table, ("point", "result", "p99 (ms)", "why INVALID"), found["vw"]) == [], sweep_table
    for t in (runs_table, sweep_table):
        assert t["sw"] <= t["cw"] + 1, t
    text = page.read_text()
    assert text.count("<details>") >= len(_md_rows(md, "| run |"))
    assert "WER 20.238% (lower is better)" in text and "(lower is better); CLIP " in text
    # no figure puts runs of different models or scenarios on one axis: each figure's labels name only runs
    # of its section's benchmark and scenario, and every performance run is drawn in its own section
    runs = {r["run"]: (r["benchmark"], r["scenario"], r["mode"]) for r in _md_rows(md, "| run |")}
    sections = re.findall(r'<section class="group" data-benchmark="([^"]*)" data-scenario="([^"]*)">(.*?)</section>',
                          text, re.S)
    assert {(html.unescape(b), s) for b, s, _ in sections} >= {("cacher", "SingleStream"), ("llama3.1-8b", "Server")}
    drawn = set()
    for bench, scenario, body in sections:
        for figure in re.findall(r"<figure>(.*?)</figure>", body, re.S):
            labels = {html.unescape(x).strip() for x in re.findall(r"<text[^>]*>([^<]*)</text>", figure)}
            named = labels & set(runs)
            assert all(runs[r][:2] == (html.unescape(bench), scenario) for r in named), (bench, scenario, named)
            drawn |= named
    assert {r for r, (_, _, mode) in runs.items() if mode == "performance"} <= drawn
    # every figure outside those sections is the sweep's (one model, one scenario), above the runs
    outside = re.sub(r'<section class="group".*?</section>', "", text, flags=re.S)
    assert outside.rfind("<svg") < outside.index("<h2>Runs</h2>")
