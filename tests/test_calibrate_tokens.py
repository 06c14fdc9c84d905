"""Sizing of token-stream runs: the calibration of :mod:`mlharness.kinds.tokens.calibrate` on the token oracle
(with delays that stand for a slow model), and the fixes a submission's INVALID Server run is retried with."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mlharness.calibration.calibrate import EARLY_STOPPING_QUERIES
from mlharness.calibration.explain import explain
from mlharness.kinds.tokens import calibrate as ct
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.generative import GenerativePredictor
from mlharness.submission.sizing import early_stopping_floor

pytest.importorskip("tokenizers")

DATA = Path(__file__).parent / "data" / "loadgen_invalid"


class Settings:
    """The TestSettings fields the calibration reads and sets (the llama3_1-8b-interactive limits)."""

    def __init__(self, min_query_count: int = 100):
        self.min_duration_ms = 1000
        self.min_query_count = min_query_count
        self.ttft_latency = 500_000_000
        self.tpot_latency = 30_000_000
        self.server_target_qps = 0.5
        self.offline_expected_qps = 1.0
        self.single_stream_expected_latency_ns = 2e9


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> tuple[Path, list]:
    from mlharness.tasks.cnndm.dataset import CnnDm
    from mlharness.tasks.cnndm.models import oracle_table
    from mlharness.tasks.cnndm.synth import write_synthetic_cnndm

    root = write_synthetic_cnndm(tmp_path_factory.mktemp("cnndm") / "set", count=8, seed=3)
    table = root.parent / "table.json"
    table.write_text(json.dumps(oracle_table(root / "cnn_eval.json", root / "tokenizer")))
    data = CnnDm(root / "cnn_eval.json")
    return table, [(i, data.prompt(i)) for i in range(8)]


def oracle(table: Path, **options):
    from mlharness.predictors import PREDICTORS

    p = PREDICTORS.get("token-oracle")(PredictorConfig(model_path=str(table), input_names=["input_ids"],
                                                       output_names=["output_ids"], options=options))
    p.load()
    return p


def test_a_fast_model_gets_a_server_rate_from_its_throughput(prompts):
    table, ps = prompts
    p = oracle(table)
    try:
        cal = ct.measure("Server", Settings(), [p], ps, budget=0.2)
    finally:
        p.close()
    assert cal.key == "target_qps" and cal.extra["concurrency"] == len(ps)
    assert cal.value == pytest.approx(0.35 * cal.measured)
    assert cal.value > 10  # far above the package's generic 0.5 samples/s
    assert cal.extra["burst_ttft_ms"] < 250 and cal.extra["ttft_limit_ms"] == 500
    # 0.35 x the rate over 1 s may hold fewer queries than early stopping needs: min_query_count says how many
    if cal.value < EARLY_STOPPING_QUERIES:
        assert cal.extra["min_query_count"] == EARLY_STOPPING_QUERIES
    assert "min_query_count" not in ct.measure("Server", Settings(min_query_count=1000), [oracle(table)], ps,
                                               budget=0.05).extra


class BatchingEngine(GenerativePredictor):
    """A stand-in engine that batches continuously: each step makes one token for every running request and
    takes longer the more requests run (``step_ms`` per request)."""

    name = "batching-test-engine"

    def __init__(self, step_ms: float, tokens: int = 10):
        super().__init__(PredictorConfig(model_path="", input_names=["input_ids"], output_names=["output_ids"]))
        self.step_s, self.tokens = step_ms / 1000.0, tokens
        self.running: list[list] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._loop, daemon=True).start()

    def load(self) -> None:
        pass

    def submit(self, requests, streams) -> None:
        with self.cond:
            self.running += [[s, 0] for s in streams]
            self.cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.running:
                    self.cond.wait()
                batch = list(self.running)
            time.sleep(self.step_s * len(batch))
            for item in batch:
                item[1] += 1
                if item[1] == 1:
                    item[0].first(np.asarray([7], np.int32))
                if item[1] == self.tokens:
                    item[0].done(np.full(self.tokens, 7, np.int32))
                    with self.cond:
                        self.running.remove(item)
                        self.cond.notify_all()

    def drain(self, timeout_s=None) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: not self.running, timeout_s)


def test_concurrency_is_lowered_until_the_time_per_token_fits(prompts):
    _, ps = prompts
    # 2 ms per running request and step: alone a sample keeps the 30 ms TPOT limit with room, eight at once (16 ms
    # per token) do not keep half of it, four (8 ms) do unless the host delays the engine's sleeps a lot
    cal = ct.measure("Server", Settings(), [BatchingEngine(step_ms=2)], ps[:8], budget=0.05)
    assert cal.extra["alone_tpot_ms"] < 15
    assert cal.extra["concurrency"] in (2, 4) and cal.extra["burst_tpot_ms"] <= 15
    assert cal.value == pytest.approx(0.35 * cal.measured)
    assert cal.measured < cal.extra["concurrency"] / (10 * 0.002 * cal.extra["concurrency"])  # 10 tokens each


def test_a_first_token_over_the_limit_gets_a_trickle(prompts):
    table, ps = prompts
    p = oracle(table, first_token_delay_ms=600)  # over the 500 ms TTFT limit whatever the rate
    try:
        cal = ct.measure("Server", Settings(), [p], ps, budget=0.01)
    finally:
        p.close()
    assert cal.extra["alone_ttft_ms"] > 500 and "concurrency" not in cal.extra
    assert cal.value == pytest.approx(max(0.1, 0.1 * cal.measured))
    assert "500" in ct.one_line(cal)


def test_offline_and_singlestream(prompts):
    table, ps = prompts
    p = oracle(table, first_token_delay_ms=20)
    try:
        offline = ct.measure("Offline", Settings(), [p], ps, budget=0.05)
        single = ct.measure("SingleStream", Settings(), [p], ps, budget=0.1)
    finally:
        p.close()
    # eight samples side by side in about the time of one: 20 ms each
    assert offline.value == pytest.approx(1.5 * offline.measured) and 8 / 0.020 / 3 < offline.measured < 8 / 0.020
    assert single.key == "target_latency" and 20 <= single.measured < 60
    assert single.value == pytest.approx(0.5 * single.measured)


def test_an_offline_burst_grows_while_more_in_flight_raises_the_rate(prompts):
    table, ps = prompts
    # the oracle answers every request after 20 ms however many are in flight (a server that batches without
    # limit): the Offline query's thousands of samples at once go faster than the eight loaded ones show
    p = oracle(table, first_token_delay_ms=20)
    try:
        grown = ct.measure("Offline", Settings(), [p], ps, budget=0.5)
    finally:
        p.close()
    assert grown.batch > len(ps) and grown.measured > len(ps) / 0.020
    assert grown.value == pytest.approx(1.5 * grown.measured) and "in bursts of" in ct.one_line(grown)
    # an engine whose time grows with what runs (2 tokens, 1 ms per running request and step) gains nothing
    kept = ct.measure("Offline", Settings(), [BatchingEngine(step_ms=1, tokens=2)], ps, budget=0.5)
    assert kept.batch == len(ps)


def test_an_overloaded_server_retries_at_half_what_it_completed():
    # the real LoadGen summary of a Server run over its bound, as an overloaded system writes it: it completed far
    # fewer samples per second than arrived
    text = (DATA / "server_over_latency.summary.txt").read_text().replace(
        "Completed samples per second    : 272.90", "Completed samples per second    : 65.18")
    e = explain(text, [], "Server", "llm")
    # a rate given as a flag turns calibration off: the fix keeps the queries early stopping needs
    assert [f.flag for f in e.fixes] == ["--target-qps 32.59 --min-query-count 700"]


def test_a_lowered_server_rate_keeps_enough_queries_for_early_stopping():
    lowered = ["m-interactive.Server.target_qps = 32.59"]
    assert early_stopping_floor("m-interactive.Server.target_qps = 500\n", lowered) == [
        f"m-interactive.Server.min_query_count = {EARLY_STOPPING_QUERIES}"]
    assert early_stopping_floor("m-interactive.Server.min_query_count = 5000\n", lowered) == []
    assert early_stopping_floor("", ["m.Offline.target_qps = 3"]) == []
