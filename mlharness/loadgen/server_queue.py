"""Server batching: how many of the waiting samples a free runner takes, decided from the model's batch times.

Greedy dynamic batching (a free runner takes everything waiting, up to the batch size) is right where a batch
costs little more than one sample (a GPU). On a CPU a batch of 4 costs nearly 4 single samples: a runner that
takes 4 waiting samples makes all of them wait for the slowest, and under a latency bound the queue carries far
less (for ResNet50 on a 2-core CPU the ideal greedy queue passes a 250 ms bound up to about 5 QPS with 4-sample
batches, and up to 12 with single samples).

So before LoadGen's clock starts, the SUT times the model on loaded samples at batch sizes 1, 2, 4, ... up to the
Server batch size (:func:`measure_batch_times`), and a free runner takes the batch size that minimises the sum of
the completion times of the samples waiting now, served in batches of that size by the runners that are free
(:func:`best_batch`; ties go to the smaller batch), each batch costing its measured time plus the harness's own
cost per batch. Where batches are nearly free this is the whole queue; where they cost their size it is one sample;
in between it grows with the queue. A runner waits for more arrivals (the manifest's ``server_max_wait_ms``) only
when the measured times say one more waiting sample would join the batch.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

MEASURE_BUDGET_S = 3.0  # time spent measuring batch times before the run; larger sizes beyond it are extrapolated
MEASURE_REPEATS = 3  # timed runs per batch size (after one untimed), median kept
TABLE_DEPTH = 4  # decisions are tabulated for queues up to TABLE_DEPTH x the batch size (beyond: as at the end)
# what a batch costs in the harness beyond the model (hand-offs, gather, completion): it only matters for models of
# microseconds, whose measured batch times are mostly noise and for which every extra batch costs throughput
HARNESS_BATCH_MS = 0.2


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, ... below ``max_batch``, and ``max_batch`` itself."""
    sizes, k = [], 1
    while k < max_batch:
        sizes.append(k)
        k *= 2
    return [*sizes, max(1, max_batch)]


def measure_batch_times(run_batch: Callable[[np.ndarray], Any], indices: list[int], max_batch: int,
                        budget_s: float = MEASURE_BUDGET_S) -> dict[int, float]:
    """Median milliseconds of ``run_batch`` (the model on gathered inputs) for each size of :func:`batch_sizes`,
    on the loaded ``indices`` (cycled when fewer); stops measuring larger sizes once ``budget_s`` is spent."""
    pool = np.asarray(indices, dtype=np.int64)
    times: dict[int, float] = {}
    start = time.perf_counter()
    for k in batch_sizes(max_batch):
        if times and time.perf_counter() - start > budget_s:
            break
        idx = pool[np.arange(k) % len(pool)]
        run_batch(idx)  # untimed: allocations for a new shape
        laps = []
        for _ in range(MEASURE_REPEATS):
            t0 = time.perf_counter()
            run_batch(idx)
            laps.append(time.perf_counter() - t0)
        times[k] = 1e3 * float(np.median(laps))
    return times


def cost_fn(times_ms: dict[int, float]) -> Callable[[int], float]:
    """Milliseconds for a batch of n: linear between measured sizes, proportional beyond the largest."""
    from mlharness.loadgen.queueing import batch_time_fn

    return batch_time_fn(times_ms)


def completion_sum(q: int, k: int, free: int, cost: Callable[[int], float]) -> float:
    """Sum of the completion times of ``q`` waiting samples served in batches of ``k`` (the last one smaller) by
    ``free`` runners, each batch starting when a runner is done with its previous one."""
    total, j, left = 0.0, 0, q
    while left > 0:
        size = min(k, left)
        total += size * ((j // free) * cost(k) + cost(size))
        left -= size
        j += 1
    return total


def best_batch(q: int, free: int, max_batch: int, cost: Callable[[int], float]) -> int:
    """The batch size (1 .. min(q, max_batch)) a free runner takes from ``q`` waiting samples."""
    best_k, best = 1, completion_sum(q, 1, free, cost)
    for k in range(2, min(q, max_batch) + 1):
        c = completion_sum(q, k, free, cost)
        if c < best * (1 - 1e-9):
            best_k, best = k, c
    return best_k


class BatchPolicy:
    """:func:`best_batch` tabulated for queues up to ``TABLE_DEPTH x max_batch`` and 1 .. ``runners`` free
    runners; greedy (take everything up to the batch size) until batch times are known."""

    def __init__(self, max_batch: int, runners: int, times_ms: dict[int, float] | None = None):
        self.max_batch = max(1, max_batch)
        self.runners = max(1, runners)
        self.times_ms = times_ms
        self.table: list[list[int]] | None = None
        if times_ms:
            sizes = sorted(times_ms)
            # a larger batch never takes less than a smaller one (a faster reading is noise), plus the harness's cost
            model = np.maximum.accumulate([times_ms[k] for k in sizes])
            cost = cost_fn({k: float(t) + HARNESS_BATCH_MS for k, t in zip(sizes, model, strict=True)})
            depth = TABLE_DEPTH * self.max_batch
            self.table = [[0] + [best_batch(q, f, self.max_batch, cost) for q in range(1, depth + 1)]
                          for f in range(1, self.runners + 1)]

    @property
    def batches(self) -> bool:
        """Whether some queue would be served in batches of more than one sample."""
        if self.table is None:
            return self.max_batch > 1
        return any(k > 1 for row in self.table for k in row)

    def take(self, q: int, free: int) -> int:
        if self.table is None:
            return min(q, self.max_batch)
        row = self.table[min(max(free, 1), self.runners) - 1]
        return row[min(q, len(row) - 1)]

    def describe(self) -> dict[str, Any]:
        if self.table is None:
            return {"policy": "greedy", "max_batchsize": self.max_batch}
        return {"policy": "least total completion time on measured batch times",
                "batch_ms": {str(k): round(v, 3) for k, v in self.times_ms.items()},
                "takes": {str(q): self.take(q, 1) for q in range(1, 2 * self.max_batch + 1)}}


class ServerQueue:
    """The Server's waiting samples between the feeder and the runners (the ``Handoff`` of the other scenarios):
    arrivals are appended; a free runner takes :meth:`BatchPolicy.take` of them, oldest first."""

    def __init__(self, max_batchsize: int, coalesce_wait_s: float | None, runners: int, batch_cls: Any):
        self.ready = threading.Condition(threading.Lock())
        self.parts: deque[list[Any]] = deque()  # [ids, idx, issue time ns, arrival perf_counter]
        self.waiting = 0
        self.idle = 0  # runners waiting in take()
        self.mb = max(1, max_batchsize)
        self.wait = coalesce_wait_s or 0.0
        self.policy = BatchPolicy(self.mb, runners)
        self.batch_cls = batch_cls
        self.flushed = False
        self.stopped = False

    def set_batch_times(self, times_ms: dict[int, float]) -> None:
        """Decide from measured batch times from now on (called before LoadGen issues anything)."""
        policy = BatchPolicy(self.mb, self.policy.runners, times_ms)
        with self.ready:
            self.policy = policy

    # -- feeder side -------------------------------------------------------------------------------------------
    def top_up(self, ids: np.ndarray, idx: np.ndarray, first_ns: int = 0) -> None:
        with self.ready:
            self.parts.append([ids, idx, first_ns, time.perf_counter()])
            self.waiting += len(ids)
            self.ready.notify()

    def put(self, batch: Any, bounded: bool = True) -> None:
        raise TypeError("the Server queue takes arrivals with top_up(), not whole batches")

    def flush(self) -> None:
        with self.ready:
            self.flushed = True
            self.ready.notify_all()

    def stop(self) -> None:
        with self.ready:
            self.stopped = True
            self.ready.notify_all()

    # -- runner side -------------------------------------------------------------------------------------------
    def take(self) -> Any:
        """The next batch for a free runner; None when stopped and nothing is left."""
        with self.ready:
            self.idle += 1
            try:
                while True:
                    if self.waiting:
                        k = self.policy.take(self.waiting, self.idle)
                        if (k >= self.waiting and self.waiting < self.mb and self.wait > 0 and not self.flushed
                                and not self.stopped and self.policy.take(self.waiting + 1, self.idle) > k):
                            left = self.wait - (time.perf_counter() - self.parts[0][3])
                            if left > 0:  # a larger batch would be taken: give arrivals a moment
                                self.ready.wait(left)
                                continue
                        return self._cut(k)
                    if self.stopped:
                        return None
                    self.ready.wait()
            finally:
                self.idle -= 1

    def _cut(self, k: int) -> Any:
        """The oldest ``k`` samples as one batch (called with the lock held)."""
        first = self.parts[0]
        ids_parts, idx_parts, got = [], [], 0
        while got < k:
            part = self.parts[0]
            need = k - got
            if len(part[0]) <= need:
                self.parts.popleft()
                ids_parts.append(part[0])
                idx_parts.append(part[1])
                got += len(part[0])
            else:
                ids_parts.append(part[0][:need])
                idx_parts.append(part[1][:need])
                part[0], part[1] = part[0][need:], part[1][need:]
                got = k
        self.waiting -= k
        if self.waiting and self.idle > 1:
            self.ready.notify()  # another free runner may take the rest
        batch = self.batch_cls(ids_parts[0], idx_parts[0], first[2])
        for ids, idx in zip(ids_parts[1:], idx_parts[1:], strict=True):
            batch.add(ids, idx)
        return batch


__all__ = ["BatchPolicy", "ServerQueue", "batch_sizes", "best_batch", "completion_sum", "measure_batch_times"]
