"""The ideal Server queue against queueing theory: M/D/1 mean waiting time (Pollaczek-Khinchine), the
throughput limit, batching that helps only when batches are cheaper per sample, and the ceiling's bisection."""

from __future__ import annotations

import numpy as np
import pytest

from mlharness.loadgen.queueing import (
    batch_time_fn,
    early_stopping_percentile,
    server_ceiling,
    simulate_server,
)


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.8])
def test_batch1_queue_matches_md1_mean_wait(rho):
    service = 10.0  # ms
    qps = rho * 1000.0 / service
    lat = simulate_server(qps, {1: service}, max_batch=1, queries=200_000, seed=1)
    wait = rho * service / (2 * (1 - rho))  # M/D/1 mean waiting time
    assert lat.mean() == pytest.approx(service + wait, rel=0.05)
    assert lat.min() >= service - 1e-9


def test_instances_share_the_load():
    """Two servers of 20 ms at 80 QPS carry rho 0.8 each: stable, every sample at least 20 ms. Were the second
    instance ignored, one 20 ms server at 80 QPS (rho 1.6) would fall ever further behind."""
    two = simulate_server(80.0, {1: 20.0}, instances=2, seed=2)
    one = simulate_server(80.0, {1: 20.0}, instances=1, seed=2, queries=5_000)
    assert two.min() >= 20.0 - 1e-9 and np.percentile(two, 99) < 200.0
    assert one[-100:].mean() > 10_000.0  # the backlog of an overloaded server grows without bound


def test_batching_raises_the_ceiling_only_when_batches_are_cheaper():
    flat = {1: 10.0, 8: 80.0}  # no gain from batching
    gpu_like = {1: 10.0, 8: 20.0}  # batch of 8 for twice the time of one
    bound = 60.0
    c1 = server_ceiling(flat, bound, max_batch=1, queries=20_000)
    c8_flat = server_ceiling(flat, bound, max_batch=8, queries=20_000)
    c8_gpu = server_ceiling(gpu_like, bound, max_batch=8, queries=20_000)
    assert 0 < c1 < 100.0  # below the throughput limit of 100 QPS
    assert c8_flat <= c1 * 1.05  # batching without a gain only adds latency
    assert c8_gpu > 2 * c1  # a real batching gain lets the queue carry far more
    # at the ceiling the simulated p99 is within the bound; 10% above it, it is not
    assert np.percentile(simulate_server(c1, flat, 1, queries=20_000), 99) <= bound
    assert np.percentile(simulate_server(c1 * 1.1, flat, 1, queries=20_000), 99) > bound


def test_ceiling_is_zero_when_one_sample_misses_the_bound():
    assert server_ceiling({1: 50.0}, 40.0) == 0.0


def test_batch_time_interpolation():
    f = batch_time_fn({1: 10.0, 4: 25.0})
    assert (f(1), f(2), f(4), f(8)) == (10.0, 15.0, 25.0, 50.0)
    with pytest.raises(ValueError):
        batch_time_fn({})


def test_early_stopping_percentile():
    assert early_stopping_percentile(300) is None  # too short to ever pass at p99
    assert early_stopping_percentile(500) == 100.0  # passes only with no late sample (0.99**459 < 1%)
    got = [early_stopping_percentile(n) for n in (1000, 1500, 5000, 270_336)]
    assert got == sorted(got, reverse=True) and 99.0 < got[-1] < 99.1  # a long run approaches p99 itself
    assert got[1] == pytest.approx(99.6)  # 6 late samples of 1,500 are allowed


def test_same_trial_ideal_replays_a_trial_with_its_own_predict_times():
    """The bench's same-trial ideal: the trial's arrivals through the zero-overhead queue, each batch taking the
    predict time it took in the trial; LoadGen's p99 is the sorted latency at index n x 0.99."""
    from mlharness.measurement.bench_server import same_trial_ideal

    arrivals = np.array([0.0, 0.0, 0.0, 1000.0])  # three at once, then one alone
    sizes = np.ones(4, dtype=np.int64)
    predict = np.array([100.0, 100.0, 100.0, 40.0])
    r = same_trial_ideal(arrivals, sizes, predict, {1: 50.0, 2: 100.0}, 250.0, 1, harness_p99_ms=305.0)
    # latencies 100, 200, 300 (the burst, served one after another) and 40
    assert r["ideal_p99_ms"] == pytest.approx(300.0) and r["ideal_late"] == 1
    assert r["harness_p99_cost_ms"] == pytest.approx(5.0)


def test_same_trial_ideal_turns_the_harness_cost_into_a_ceiling_ratio():
    from mlharness.measurement.bench_server import same_trial_ideal

    arrivals = np.cumsum(np.random.default_rng(0).exponential(100.0, 1000))  # 10 QPS
    sizes, predict = np.ones(1000, dtype=np.int64), np.full(1000, 40.0)
    free = same_trial_ideal(arrivals, sizes, predict, {1: 40.0}, 250.0, 1, harness_p99_ms=0.0)
    assert free["harness_p99_cost_ms"] < 0 and free["cost_as_ceiling_ratio"] == 1.0  # no cost, the whole ceiling
    at = free["ideal_p99_ms"]
    small = same_trial_ideal(arrivals, sizes, predict, {1: 40.0}, 250.0, 1, harness_p99_ms=at + 2.0)
    large = same_trial_ideal(arrivals, sizes, predict, {1: 40.0}, 250.0, 1, harness_p99_ms=at + 100.0)
    assert small["harness_p99_cost_ms"] == pytest.approx(2.0)
    assert 0.95 < small["cost_as_ceiling_ratio"] < 1.0 and large["cost_as_ceiling_ratio"] < 0.8
