"""Server batching from measured batch times: the policy's arithmetic, the queue, and real LoadGen Server runs of
two toy models (one whose batches cost their size, one whose batches cost as much as one sample)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mlharness.loadgen.server_queue import (
    BatchPolicy,
    ServerQueue,
    batch_sizes,
    best_batch,
    completion_sum,
    cost_fn,
    measure_batch_times,
)
from mlharness.loadgen.stages import Batch


def test_completion_sum_by_hand():
    cost = cost_fn({1: 40.0, 2: 60.0, 4: 100.0})
    # 3 samples, batches of 2 then 1, one runner: 2 x 60 + 1 x (60 + 40)
    assert completion_sum(3, 2, 1, cost) == pytest.approx(2 * 60 + 1 * (60 + 40))
    # the same on two runners: both batches start at once
    assert completion_sum(3, 2, 2, cost) == pytest.approx(2 * 60 + 1 * 40)
    # 4 samples one at a time, one runner: 40 + 80 + 120 + 160
    assert completion_sum(4, 1, 1, cost) == pytest.approx(400)


def test_a_batch_is_taken_only_where_it_lowers_the_total_completion_time():
    linear = cost_fn({1: 40.0, 2: 80.0, 4: 160.0})  # a CPU: a batch costs its size
    assert [best_batch(q, 1, 4, linear) for q in range(1, 9)] == [1] * 8
    flat = cost_fn({1: 40.0, 2: 41.0, 4: 42.0})  # nearly free batches: the whole queue
    assert [best_batch(q, 1, 4, flat) for q in range(1, 7)] == [1, 2, 3, 4, 4, 4]
    # in between: two samples cost 2 x 40 + ... one at a time is 40 + 80 = 120, together 2 x 59 = 118
    assert best_batch(2, 1, 4, cost_fn({1: 40.0, 2: 59.0, 4: 118.0})) == 2
    assert best_batch(2, 1, 4, cost_fn({1: 40.0, 2: 61.0, 4: 122.0})) == 1
    # a tie goes to the smaller batch: 120 both ways
    assert best_batch(2, 1, 4, cost_fn({1: 40.0, 2: 60.0, 4: 120.0})) == 1
    # two free runners and two cheap-to-batch samples: one each finishes both at 40 instead of 41
    assert best_batch(2, 2, 4, flat) == 1 and best_batch(2, 1, 4, flat) == 2


def test_policy_is_greedy_until_batch_times_are_known():
    p = BatchPolicy(4, 1)
    assert [p.take(q, 1) for q in (1, 3, 9)] == [1, 3, 4] and p.batches
    p = BatchPolicy(4, 1, {1: 40.0, 2: 80.0, 4: 160.0})
    assert [p.take(q, 1) for q in (1, 3, 9, 1000)] == [1, 1, 1, 1] and not p.batches
    assert p.describe()["takes"]["8"] == 1 and p.describe()["batch_ms"]["4"] == 160.0


def test_microsecond_models_batch_greedily_whatever_the_noise():
    """For a model of microseconds the harness's own cost per batch dominates, and a noisy reading (here batch 8
    slower than two batches of 4) must not split the queue into many small batches."""
    p = BatchPolicy(8, 1, {1: 0.027, 2: 0.040, 4: 0.034, 8: 0.066})
    assert [p.take(q, 1) for q in (1, 3, 8, 20)] == [1, 3, 8, 8]


def test_batch_sizes_and_measurement():
    assert batch_sizes(1) == [1] and batch_sizes(4) == [1, 2, 4] and batch_sizes(12) == [1, 2, 4, 8, 12]
    seen: list[int] = []

    def run(idx: np.ndarray) -> None:
        seen.append(len(idx))
        time.sleep(0.002 * len(idx))

    times = measure_batch_times(run, [5, 6, 7], 4)
    assert sorted(times) == [1, 2, 4] and seen.count(4) == 4  # one untimed run and three timed per size
    assert 3.0 < times[4] / times[1] < 5.0  # what the model took, not a constant


def queue_with(times: dict[int, float] | None, wait_s: float, runners: int = 1, n: int = 4) -> ServerQueue:
    q = ServerQueue(4, wait_s, runners, Batch)
    if times is not None:
        q.set_batch_times(times)
    for i in range(n):  # LoadGen's Server: one sample per query
        q.top_up(np.array([100 + i], dtype=np.uint64), np.array([i], dtype=np.int64))
    return q


def test_queue_takes_what_the_policy_says_oldest_first():
    q = queue_with({1: 40.0, 2: 80.0, 4: 160.0}, wait_s=10.0)
    got = [q.take() for _ in range(4)]
    assert [b.n for b in got] == [1, 1, 1, 1]
    assert [int(b.arrays()[1][0]) for b in got] == [0, 1, 2, 3]
    q = queue_with({1: 40.0, 2: 41.0, 4: 42.0}, wait_s=10.0)
    b = q.take()  # four waiting, batches nearly free: all of them, no wait (the batch is full)
    assert b.n == 4 and b.arrays()[0].tolist() == [100, 101, 102, 103]


def test_no_coalescing_wait_where_batches_do_not_pay():
    """A lone sample is taken at once when the measured times say no batch pays, whatever the wait setting; where
    batches pay it waits for company up to the wait (a flush ends the wait)."""
    q = queue_with({1: 40.0, 2: 80.0, 4: 160.0}, wait_s=10.0, n=1)
    t0 = time.perf_counter()
    assert q.take().n == 1 and time.perf_counter() - t0 < 1.0
    # batches pay only from three waiting samples on: a lone sample would not be joined by the next arrival
    q = queue_with({1: 40.0, 2: 62.0, 4: 110.0}, wait_s=10.0, n=1)
    t0 = time.perf_counter()
    assert q.policy.take(3, 1) == 2 and q.take().n == 1 and time.perf_counter() - t0 < 1.0
    q = queue_with({1: 40.0, 2: 41.0, 4: 42.0}, wait_s=10.0, n=1)
    threading.Timer(0.3, q.flush).start()
    t0 = time.perf_counter()
    assert q.take().n == 1 and 0.2 < time.perf_counter() - t0 < 5.0


def test_stopped_queue_hands_out_what_is_left_then_none():
    q = queue_with(None, wait_s=10.0, n=6)
    q.stop()
    assert [q.take().n, q.take().n, q.take()] == [4, 2, None]


# -- through the CLI and the real LoadGen -------------------------------------------------------------------------
def toy(folder: Path, name: str, fixed_ms: float, per_sample_ms: float) -> Path:
    (folder / "none.bin").write_bytes(b"")
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n"
        "framework:\n  name: echo\n  warmup: 1\n"
        "inputs:\n  - name: x\n    shape: [4]\noutputs:\n  - name: y\n"
        "model:\n  graph_path: none.bin\n"
        "dataset:\n  name: inline\n  init: |\n    def init(count):\n        return count or 64\n"
        "batching:\n  max_batchsize: 4\n  server_max_wait_ms: 1.0\n"
        "preprocess: |\n  import numpy as np\n  def preprocess(ctx, index):\n"
        "      return np.full((4,), index, np.float32)\n"
        "postprocess: |\n  def postprocess(ctx, outputs):\n      return outputs[0][:, 0]\n"
        "predict: |\n  import time\n  def predict(ctx, run, inputs):\n"
        f"      time.sleep(({fixed_ms} + {per_sample_ms} * len(inputs[0])) / 1000)\n      return run(inputs)\n")
    return path


def server_run(tmp_path: Path, manifest: Path, qps: float) -> tuple[dict, list[int]]:
    out = tmp_path / manifest.stem
    env = dict(os.environ, MLHARNESS_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--scenario",
                        "Server", "--mode", "performance", "--no-progress", "--no-calibrate", "--target-qps",
                        str(qps), "--target-latency-ms", "1000", "--min-duration-ms", "1500", "--min-query-count",
                        "200", "--trace", "model", "--output", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    meta = json.loads((out / "mlharness_run.json").read_text())
    trace = json.loads((out / "mlharness_trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    sizes = [e["args"]["samples"] for e in events if e.get("ph") == "X" and e.get("name") == "predict"]
    assert meta["samples"]["issued"] == meta["samples"]["completed"] == sum(sizes)
    return meta, sizes


def test_server_runs_batch_only_where_batches_pay(tmp_path):
    """Same arrival stream (about 60% busy one sample at a time): the model whose batches cost their size is
    never batched; the model whose batches cost one sample is batched whenever samples wait."""
    linear, sizes = server_run(tmp_path, toy(tmp_path, "lineartoy", 0.0, 4.0), 150)
    measured = linear["batching"]["server"]
    assert measured["policy"].startswith("least total completion time")
    assert 3.0 < measured["batch_ms"]["4"] / measured["batch_ms"]["1"] < 5.0
    assert set(sizes) == {1}, sizes
    flat, sizes = server_run(tmp_path, toy(tmp_path, "flattoy", 4.0, 0.0), 150)
    assert flat["batching"]["server"]["takes"]["4"] == 4
    assert max(sizes) > 1 and len(sizes) < flat["samples"]["issued"], sizes
