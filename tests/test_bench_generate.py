"""`mlharness bench generate` runs end to end on the tiny random Llama (quick, tiny settings) and reports every
figure its goals are stated in, consistently with each other; the figures' values are the benchmark's business,
not this test's."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

KEYS = ("offline_bare_tokens_per_s", "offline_harness_tokens_per_s", "offline_ratio", "bare_ttft_p50_ms",
        "harness_ttft_p50_ms", "ttft_p50_added_ms", "bare_tpot_p50_ms", "harness_tpot_p50_ms", "tpot_p50_added_ms",
        "server_qps", "bare_e2e_p50_ms", "server_harness_tokens_per_s")


def test_new_token_counts_stop_at_the_first_eos_after_the_minimum():
    from mlharness.measurement.bench_generate import new_token_counts

    # two prompt columns, then new tokens; EOS is 2, padding after it is 2 as well
    out = np.array([[7, 7, 5, 2, 2, 2], [7, 7, 2, 5, 2, 2], [7, 7, 5, 6, 8, 9]])
    assert new_token_counts(out, 2, {2}, 1) == [2, 1, 4]
    assert new_token_counts(out, 2, {2}, 2) == [2, 3, 4]  # an EOS before min_new_tokens is a token like others


@pytest.mark.timing  # its figures compare timed runs of the harness and the bare engine
def test_bench_generate_quick_reports_every_figure(run_cli):
    from mlharness.measurement.bench_generate import format_generate_figures

    proc = run_cli("bench", "generate", "--quick", "--count", "8", "--seconds", "0.3", "--server-queries", "3",
                   "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    f = json.loads(proc.stdout.strip().splitlines()[-1])
    for k in KEYS:
        assert isinstance(f[k], int | float) and math.isfinite(f[k]), k
    assert f["manifest"] == "llama3.1-8b-random" and f["rounds"] == 1 and f["count"] == 8
    assert f["offline_batch"] == 8 and f["max_new_tokens"] == 128  # the manifest's settings
    for k in ("offline_bare_tokens_per_s", "offline_harness_tokens_per_s", "bare_ttft_p50_ms", "harness_ttft_p50_ms",
              "bare_tpot_p50_ms", "harness_tpot_p50_ms", "server_qps", "server_harness_tokens_per_s"):
        assert f[k] > 0, k
    assert f["offline_ratio"] == pytest.approx(f["offline_harness_tokens_per_s"] / f["offline_bare_tokens_per_s"])
    assert f["ttft_p50_added_ms"] == pytest.approx(f["harness_ttft_p50_ms"] - f["bare_ttft_p50_ms"])
    assert f["tpot_p50_added_ms"] == pytest.approx(f["harness_tpot_p50_ms"] - f["bare_tpot_p50_ms"])
    # a token's time is below the whole generation's, and the light load is below what one at a time sustains
    assert f["bare_tpot_p50_ms"] < f["bare_e2e_p50_ms"] and f["bare_ttft_p50_ms"] < f["bare_e2e_p50_ms"]
    assert f["server_qps"] < 1e3 / f["bare_e2e_p50_ms"]
    assert all(len(v) == 1 for v in f["per_round"].values())

    # the readable table: each goal next to its figure, the ratio that of the printed rates
    text = format_generate_figures(f)
    assert "(goal >= 0.95)" in text and "(goal <= 2)" in text
    bare = float(re.search(r"Offline bare engine \(batch 8\)\s+([\d,.]+) tokens/s", text)[1].replace(",", ""))
    harness = float(re.search(r"Offline mlharness\s+([\d,.]+) tokens/s", text)[1].replace(",", ""))
    ratio = float(re.search(r"ratio mlharness / bare\s+([\d.]+)", text)[1])
    assert ratio == pytest.approx(harness / bare, rel=2e-3)  # of rates printed to 4 figures
