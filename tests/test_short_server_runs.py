"""A token model's first Server run with nothing but ``--min-duration-ms 2000``: a tiny random-weight Llama built
here (not an MLPerf benchmark, so its TTFT/TPOT bounds are derived from its measured single-request latency),
through the real CLI and LoadGen. The run is VALID on the first try, LoadGen is asked for the queries the estimate
announced, and an explicit ``--min-query-count`` reaches LoadGen as given."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from mlharness.calibration.estimate import EARLY_STOPPING_QUERIES
from mlharness.loadgen.logs import detail_values

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = [pytest.mark.slow, pytest.mark.timing]  # VALID with only a min duration; whole runs: calibration, then up to a few hundred generations

from tests.test_generative_transformers import MANIFEST, PROMPT_LEN, VOCAB, checkpoint  # noqa: E402, F401

NEW_TOKENS, COUNT = 4, 16


@pytest.fixture(scope="module")
def manifest(checkpoint, tmp_path_factory) -> Path:  # noqa: F811 - the imported fixture is this one's input
    path = tmp_path_factory.mktemp("short") / "tiny_llama.yaml"
    path.write_text(MANIFEST.format(checkpoint=checkpoint, new_tokens=NEW_TOKENS, count=COUNT, vocab=VOCAB,
                                    prompt_len=PROMPT_LEN))
    return path


def _server(run_cli, manifest: Path, out: Path, *extra: str):
    start = time.monotonic()
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Server", "--mode", "performance",
                   "--min-duration-ms", "2000", "--no-progress", "--output", str(out), *extra, timeout=300)
    print(f"Server run {' '.join(extra) or '(only --min-duration-ms 2000)'}: {time.monotonic() - start:.1f} s wall")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads((out / "mlharness_run.json").read_text()), detail_values(out / "mlperf_log_detail.txt")


def test_first_server_run_is_valid_with_only_a_min_duration(run_cli, tmp_path, manifest):
    proc, md, detail = _server(run_cli, manifest, tmp_path / "out")
    print(proc.stderr)
    assert re.search(r"^\s*result\s+VALID", proc.stdout, re.M), proc.stdout + proc.stderr
    assert "Result is : VALID" in (tmp_path / "out" / "mlperf_log_summary.txt").read_text()
    # the bounds come from the model, with their source, not LoadGen's silent 100 ms
    for key, what in (("ttft_latency", "time to first token"), ("tpot_latency", "time per output token")):
        bound = md["latency_bound"][key]
        assert bound["kind"] == "derived" and bound["ms"] >= 5 * bound["single_sample_p99_ms"]
        assert re.search(rf"p99 {what} <= {bound['ms']:.6g} ms, from 5 x the measured single-request", proc.stderr)
        assert md["settings"][key] == int(bound["ms"] * 1e6)  # what LoadGen was given
    # LoadGen was asked for what the estimate announced before the (first) play: a calibrated rate the host no
    # longer kept was played once more, lower (second_try.py), and the first play's logs are in first_try/
    est = re.search(r"LoadGen will issue at least ([\d,]+) queries", proc.stderr)
    assert est, proc.stderr
    if "second_try" in md["calibration"]:
        print("played a second time:", md["calibration"]["second_try"])
        detail = detail_values(tmp_path / "out" / "first_try" / "mlperf_log_detail.txt")
    announced = int(est.group(1).replace(",", ""))
    asked = int(detail["effective_min_query_count"])
    qps, min_s = float(detail["effective_target_qps"]), int(detail["effective_min_duration_ms"]) / 1000.0
    assert announced == max(asked, int(-(-qps * min_s // 1)))
    assert asked <= EARLY_STOPPING_QUERIES
    assert md["samples"]["issued"] >= (md["calibration"].get("second_try") or {}).get("min_query_count", announced)


def test_an_explicit_min_query_count_reaches_loadgen_as_given(run_cli, tmp_path, manifest):
    proc, md, detail = _server(run_cli, manifest, tmp_path / "out", "--min-query-count", "40")
    assert int(detail["effective_min_query_count"]) == 40  # never raised for early stopping
    assert md["settings"]["min_query_count"] == 40
    # said in one line before the run, and recorded as not submittable
    assert "development shortcut: min_query_count 40 from --min-query-count is kept" in proc.stderr, proc.stderr
    assert any("min_query_count 40 from --min-query-count" in r for r in md["not_submittable_reasons"])
    assert not md["submittable"]
