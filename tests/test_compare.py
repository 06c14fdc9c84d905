"""``mlharness compare A B`` over real LoadGen runs of a toy model, one side slowed by a postprocess hook that
sleeps: the faster side is named, ratios equal those of the two mlperf_log_summary.txt files, three repeats per
side give a spread verdict, the HTML page is self-contained, and bad input gets an error naming the path."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from mlharness.errors import MLHarnessError
from mlharness.measurement.compare import BEYOND, NO_REPEATS, ONE_SIDED, WITHIN, compare, config_rel
from tests.helpers.toy_manifest import toy_manifest

SLEEP = "import time\n\n\ndef postprocess(ctx, outputs):\n    time.sleep(0.002)\n    return outputs[0]\n"
PERF = ("--scenario", "Offline", "--mode", "performance", "--count", "16", "--min-duration-ms", "200",
        "--min-query-count", "64", "--target-qps", "500", "--no-progress")


def _cli(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """fast/r1..r3 and slow/r1..r3: Offline runs of the echo toy, the slow one sleeping 2 ms per sample."""
    root = tmp_path_factory.mktemp("compare")
    env = dict(os.environ, MLHARNESS_CACHE=str(root / "cache"))
    env.pop("MLHARNESS_MANIFEST_PATH", None)
    (root / "model.bin").write_bytes(b"placeholder: the echo predictor never reads it")
    for name, post in (("fast", None), ("slow", SLEEP)):
        m = toy_manifest(warmup=0)
        if post:
            m["postprocess"] = post
        (root / f"{name}.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
        for rep in (1, 2, 3):
            proc = _cli(env, "run", "--manifest", str(root / f"{name}.yaml"), *PERF, "--output",
                        str(root / name / f"r{rep}"), cwd=root)
            assert proc.returncode == 0, proc.stderr
    return root / "fast", root / "slow", env


def _loadgen(run: Path, key: str) -> float:
    """A value of LoadGen's summary, read here line by line (not by the report package under test)."""
    for line in (run / "mlperf_log_summary.txt").read_text().splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip() == key:
            return float(v)
    raise AssertionError(f"{key} not in {run}")


def test_the_faster_side_is_named_and_ratios_equal_the_summaries(sides):
    fast, slow, env = sides
    proc = _cli(env, "compare", str(slow / "r1"), str(fast / "r1"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["faster"] == "b"
    [pair] = data["pairs"]
    assert (pair["benchmark"], pair["scenario"], pair["mode"]) == ("toy", "Offline", "performance")
    results = [[line.split(":")[1].strip() for line in (run / "mlperf_log_summary.txt").read_text().splitlines()
                if line.startswith("Result is")] for run in (slow / "r1", fast / "r1")]
    assert [pair["a_results"], pair["b_results"]] == results
    metrics = {m["name"]: m for m in pair["metrics"]}
    for key in ("Samples per second", "99.00 percentile latency (ns)", "50.00 percentile latency (ns)"):
        a, b = _loadgen(slow / "r1", key), _loadgen(fast / "r1", key)
        assert metrics[key]["ratio"] == b / a
        assert metrics[key]["delta"] == b - a
        assert metrics[key]["better"] == "b", key  # higher throughput, lower latency: both the fast side
        assert metrics[key]["verdict"] == NO_REPEATS
    qps_a, qps_b = _loadgen(slow / "r1", "Samples per second"), _loadgen(fast / "r1", "Samples per second")
    assert data["speedup"] == pytest.approx(qps_b / qps_a, rel=1e-12)
    # the terminal: the first line names the faster side and by how much
    proc = _cli(env, "compare", str(fast / "r1"), str(slow / "r1"))
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"A ({fast / 'r1'}) is faster than B ({slow / 'r1'}): {qps_b / qps_a:.3f}x"), first
    assert "Samples per second" in proc.stdout and "B / A" in proc.stdout


def test_repeats_give_a_spread_verdict(sides):
    fast, slow, _ = sides
    c = compare(fast, slow)
    [pair] = c.pairs
    assert sorted(pair.a.rels) == ["r1", "r2", "r3"] and sorted(pair.b.rels) == ["r1", "r2", "r3"]
    primary = pair.primary
    assert primary is not None and primary.name == "Samples per second"
    a = [_loadgen(fast / f"r{i}", "Samples per second") for i in (1, 2, 3)]
    b = [_loadgen(slow / f"r{i}", "Samples per second") for i in (1, 2, 3)]
    assert sorted(primary.a.values) == sorted(a) and sorted(primary.b.values) == sorted(b)
    assert primary.ratio == statistics.median(b) / statistics.median(a)
    assert primary.verdict == BEYOND and primary.better == "a" and c.faster == "a"
    assert "beyond spread" in c.headline()
    # the same runs on both sides: every difference is within the spread
    same = compare(fast, fast)
    assert same.faster is None and "equally fast" in same.headline()
    assert {m.verdict for m in same.pairs[0].metrics} == {WITHIN}
    # repeats on one side only say so
    one = compare(fast, slow / "r2")
    assert one.pairs[0].primary.verdict == ONE_SIDED


def test_trees_of_different_systems_pair_by_benchmark_and_scenario(sides, tmp_path):
    fast, slow, _ = sides
    for side, src, system in (("A", fast, "sys-a"), ("B", slow, "sys-b")):
        for rep in (1, 2):
            shutil.copytree(src / f"r{rep}", tmp_path / side / system / "toy" / "Offline" / "performance"
                            / f"run_{rep}")
    c = compare(tmp_path / "A", tmp_path / "B")
    [pair] = c.pairs
    assert len(pair.a.runs) == 2 and len(pair.b.runs) == 2 and c.faster == "a"
    assert not c.only_a and not c.only_b
    # a run folder (or its summary) against a tree: the one group of the tree pairs with it
    one = compare(fast / "r3" / "mlperf_log_summary.txt", tmp_path / "B")
    assert len(one.pairs) == 1 and one.pairs[0].a.rels == ["."] and one.faster == "a"
    assert config_rel("points/qps-000010.000-r2") == "points/qps-000010.000"
    assert config_rel("sys/toy/Offline/performance/run_1") == "sys/toy/Offline/performance"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_html_page_is_self_contained(sides, tmp_path):
    fast, slow, env = sides
    out = tmp_path / "cmp.html"
    proc = _cli(env, "compare", str(fast), str(slow), "--html", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_mode & 0o777 == 0o644
    page = _Page()
    page.feed(out.read_text())
    names = [t for t, _ in page.tags]
    assert "script" not in names and "img" not in names and "iframe" not in names
    for _, attrs in page.tags:
        for attr in ("src", "href"):
            assert attrs.get(attr) in (None, "data:,"), attrs
    assert "http" not in out.read_text().replace("http-equiv", "")
    scroll = [a for t, a in page.tags if t == "div" and a.get("class") == "scroll"]
    assert len(scroll) == 1 and names.count("table") == 1
    assert "overflow-x: auto" in out.read_text() and "position: sticky" in out.read_text()
    text = "".join(page.text)
    assert compare(fast, slow).headline() in text
    assert names.count("tr") == 1 + len(compare(fast, slow).pairs[0].metrics)
    # an existing page is kept unless --force
    again = _cli(env, "compare", str(fast), str(slow), "--html", str(out))
    assert again.returncode != 0 and str(out) in again.stderr


def test_errors_name_the_path(sides, tmp_path):
    fast, _, env = sides
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _cli(env, "compare", str(empty), str(fast))
    assert proc.returncode == 2 and f"no runs in {empty}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _cli(env, "compare", str(fast), str(tmp_path / "missing"))
    assert proc.returncode == 2 and f"{tmp_path / 'missing'} does not exist" in proc.stderr, proc.stderr
    # an accuracy run pairs with no performance run
    acc = tmp_path / "acc"
    ran = _cli(env, "run", "--manifest", str(fast.parent / "fast.yaml"), "--scenario", "Offline", "--mode",
               "accuracy", "--count", "4", "--no-progress", "--output", str(acc), cwd=fast.parent)
    assert ran.returncode == 0, ran.stderr
    with pytest.raises(MLHarnessError, match="nothing pairs") as e:
        compare(fast, acc)
    assert str(fast) in str(e.value) and str(acc) in str(e.value) and "toy Offline accuracy" in str(e.value)


def test_token_latencies_of_a_generative_model_are_compared(sides, tmp_path):
    """The llama3.1-8b oracle against a copy whose first token comes 3 ms late: TTFT and TPOT rows carry the
    ratios of LoadGen's summaries, and the late side is the slower one."""
    _, _, env = sides
    builtin = Path(__file__).parents[1] / "mlharness" / "manifests" / "llama3.1-8b" / "llama3.1-8b-oracle.yaml"
    late = yaml.safe_load(builtin.read_text())
    late["framework"]["options"]["first_token_delay_ms"] = 3
    (tmp_path / "late.yaml").write_text(yaml.safe_dump(late, sort_keys=False))
    args = ("--scenario", "SingleStream", "--mode", "performance", "--count", "8", "--min-duration-ms", "200",
            "--min-query-count", "8", "--no-progress")
    for name, manifest in (("prompt", "llama3.1-8b-oracle"), ("late", str(tmp_path / "late.yaml"))):
        ran = _cli(env, "run", "--manifest", manifest, *args, "--output", str(tmp_path / name), cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr[-3000:]
    c = compare(tmp_path / "prompt", tmp_path / "late")
    assert c.faster == "a"
    metrics = {m.name: m for m in c.pairs[0].metrics}
    for key in ("Mean First Token latency (ns)", "99.00 percentile first token latency (ns)",
                "Mean Time per Output Token (ns)", "50.00 percentile time to output token (ns)"):
        a, b = _loadgen(tmp_path / "prompt", key), _loadgen(tmp_path / "late", key)
        assert metrics[key].ratio == b / a and not metrics[key].higher_is_better, key
    assert metrics["Mean First Token latency (ns)"].better == "a"
