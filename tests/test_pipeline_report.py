"""The HTML report's pipeline section: a pipeline-toy run's stages with their calls, errors, latency percentiles,
busy share and throughput as pipeline_summary.json states them, and a timeline of the first samples' visits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from mlharness.cli import main
from mlharness.paths import MANIFESTS_DIR

pytest.importorskip("mlperf_loadgen")
pytest.importorskip("matplotlib")


def test_the_report_shows_each_stage_and_a_timeline(tmp_path):
    out = tmp_path / "runs" / "toy"
    p = subprocess.run([sys.executable, "-m", "mlharness", "run", "--manifest",
                        str(MANIFESTS_DIR / "pipeline-toy" / "pipeline-toy.yaml"), "--scenario", "Offline", "--mode",
                        "performance", "--min-duration-ms", "300", "--output", str(out), "--no-progress"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "MLHARNESS_CACHE": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stdout + p.stderr
    html = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "runs"), "--html", str(html)]) == 0
    page = html.read_text()
    assert "<h2>Pipelines</h2>" in page and "stage visits of the first 12 samples" in page
    summary = json.loads((out / "pipeline_summary.json").read_text())
    section = page[page.index("<h2>Pipelines</h2>"):]
    rows = {r[1]: r for r in (re.findall(r"<td>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", section))
            if r and r[0] == "toy"}
    for st in summary["stages"]:
        lat, row = st["latency_ms"], rows[st["stage"]]
        share = st["busy_s"] / (st["workers"] * summary["wall_s"])
        assert row[2:] == ["toy-stage", str(st["workers"]), str(st["count"]), "0",
                           f"{lat['p50']:,.3g} / {lat['p90']:,.3g} / {lat['p99']:,.3g}", f"{share:.0%}",
                           f"{st['throughput']:,.4g}", f"{st['load_s']:.3g}"]
        assert 0 < share <= 1 and st["count"] == summary["samples"] > 64
    assert f"{summary['throughput']:,.4g} (slowest stage alone:" in page
    # the timeline: a row per sample, the stages in its legend
    svg = section[section.index("<svg"):section.index("</svg>")]
    first = sorted((json.loads(x) for x in (out / "pipeline_results.jsonl").read_text().splitlines()),
                   key=lambda r: r["stages"][0]["queued_s"])[:12]
    assert all(f"#{r['qsl_idx']}<" in svg or f"#{r['qsl_idx']} " in svg for r in first), svg[:2000]
    assert all(n in svg for n in ("retrieve", "rerank", "generate"))
