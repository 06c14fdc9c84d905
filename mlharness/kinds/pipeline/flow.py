"""How items flow through the stages, apart from LoadGen (the SUT of ``kinds/pipeline/sut.py``, the calibration
and ``scripts/bench_pipeline.py`` all drive it).

Each stage has an input queue and ``workers`` threads of its own. A worker takes the oldest item waiting for its
stage, runs the stage's ``before`` hook, the stage and its ``after`` hook, and puts the item on the next stage's
queue (or on an earlier stage's, where the item's ``route`` names one), so while one sample is in the third stage
another is in the second: stages of different samples overlap, and a stage of several workers serves several
samples at once.

Threads: a stage's ``threads`` sets torch's intra-op threads of each of its workers, in the worker (OpenMP's and
MKL's counts are the calling thread's own), so CPU stages sharing the cores each take their share instead of each
spreading a call over every core (two stages of 2 workers with torch's default pool of a thread per core put 8
spinning threads on a 2-core host; docs/pipelines.md has the bench). torch keeps the last count set as the default of threads that have not called it yet, so a
pipeline sets ``threads`` on all its torch stages or on none.

Deadlines: a watchdog thread looks at every call in progress; one past its stage's ``timeout_s`` fails its sample
naming the stage, and the stage gets a new worker in place of the one that is stuck, which is abandoned (a daemon
thread, never joined; when its call ever returns, the result is dropped and the thread ends, touching nothing of
the job: its visit keeps the watchdog's leave time and its sample is not ended again). Failures: whatever a
stage or hook raises fails only its sample (:class:`Job` records the stage, the sample and the error); the others
go on. Every submitted job ends exactly once, through ``on_done``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlharness.kinds.pipeline.stage import Item, StageError, StageSpec

log = logging.getLogger(__name__)
WATCH_S = 0.01  # how often the watchdog looks at the calls in progress


@dataclass
class Visit:
    stage: str
    queued: float  # perf_counter when the item was put on the stage's queue
    enter: float = 0.0  # when a worker took it
    leave: float = 0.0  # when the stage (and its hooks) finished with it


@dataclass
class Job:
    """One sample travelling through the pipeline."""

    token: Any  # the caller's handle (LoadGen's sample id)
    index: int  # the sample's index in the dataset (QSL)
    item: Item
    visits: list[Visit] = field(default_factory=list)
    error: StageError | None = None
    ended: float = 0.0
    drained: bool = False  # completed to LoadGen empty after a signal: its response (and result) never handed
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _done: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.visits:
            out[v.stage] = out.get(v.stage, 0) + 1
        return out

    def claim(self) -> bool:
        """True once: for whoever ends the job (its last stage, a failure, the watchdog, a drain)."""
        with self._lock:
            if self._done:
                return False
            self._done = True
            return True


@dataclass
class Lane:
    """One stage at run time: its spec, the built stage, its hooks, its queue and workers."""

    spec: StageSpec
    stage: Any
    before: Callable[[Item], Item] | None = None
    after: Callable[[Item], Item] | None = None
    queue: queue.Queue = field(default_factory=queue.Queue)
    workers: int = 0
    load_s: float = 0.0


def worker_threads(n: int) -> None:
    """This thread's torch intra-op threads (no-op without torch). torch reads its process default into a thread at
    the thread's first call: asked for first, so that first read is not a later call's and cannot undo ``n``."""
    try:
        import torch
    except ImportError:
        return
    torch.get_num_threads()
    torch.set_num_threads(int(n))


class Flow:
    """The stages' worker pools; ``submit`` jobs, each ends once through ``on_done(job)``."""

    def __init__(self, lanes: list[Lane], on_done: Callable[[Job], None]):
        self.lanes = lanes
        self.by_name = {lane.spec.name: k for k, lane in enumerate(lanes)}
        self.on_done = on_done
        self._calls: dict[int, tuple[Job, int, float]] = {}  # worker id -> (job, lane, deadline)
        self._calls_lock = threading.Lock()
        self._stop = threading.Event()
        self._next_id = 0
        self._watch: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    def start(self) -> None:
        for k, lane in enumerate(self.lanes):
            for _ in range(lane.spec.workers):
                self._spawn(k)
        self._watch = threading.Thread(target=self._watchdog, name="mlharness-stage-watchdog", daemon=True)
        self._watch.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the workers (each ends after its call); a worker stuck in a call is not waited for past
        ``timeout_s``."""
        self._stop.set()
        for lane in self.lanes:
            for _ in range(lane.workers):
                lane.queue.put(None)
        if self._watch is not None:
            self._watch.join(timeout_s)

    def _spawn(self, k: int) -> None:
        lane = self.lanes[k]
        with self._calls_lock:
            wid = self._next_id
            self._next_id += 1
            lane.workers += 1
        threading.Thread(target=self._work, args=(k, wid), name=f"mlharness-stage-{lane.spec.name}-{wid}",
                         daemon=True).start()

    # -- jobs ----------------------------------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        self._enqueue(job, 0)

    def _enqueue(self, job: Job, k: int) -> None:
        job.visits.append(Visit(self.lanes[k].spec.name, time.perf_counter()))
        self.lanes[k].queue.put(job)

    def end(self, job: Job, error: StageError | None = None) -> bool:
        """End a job (with its error, if any) unless it has ended already; True if this call did."""
        if not job.claim():
            return False
        job.error = error
        job.ended = time.perf_counter()
        try:
            self.on_done(job)
        except BaseException as e:  # noqa: BLE001 - a worker must survive its caller's completion failing
            log.error("completing sample %s failed: %s: %s", job.index, type(e).__name__, e)
        return True

    def _fail(self, job: Job, lane: Lane, e: BaseException) -> None:
        if isinstance(e, StageError):
            err = StageError(e.stage, e.detail, job.index)
        else:
            err = StageError(lane.spec.name, f"{type(e).__name__}: {e}", job.index)
        self.end(job, err)

    def _work(self, k: int, wid: int) -> None:
        lane = self.lanes[k]
        if lane.spec.threads:
            worker_threads(lane.spec.threads)
        while True:
            job = lane.queue.get()
            if job is None or self._stop.is_set():
                break
            if job._done:  # failed or drained while it waited
                continue
            visit = job.visits[-1]
            visit.enter = time.perf_counter()
            with self._calls_lock:
                self._calls[wid] = (job, k, visit.enter + lane.spec.timeout_s)
            try:
                item = job.item
                if lane.before is not None:
                    item = lane.before(item)
                item = lane.stage.run(item)
                if lane.after is not None:
                    item = lane.after(item)
                failure: BaseException | None = None
            except BaseException as e:  # noqa: BLE001 - the sample fails, the stage goes on
                failure = e
            left = time.perf_counter()
            with self._calls_lock:
                mine = self._calls.pop(wid, None) is not None  # None: the watchdog timed the call out
            if not mine:
                break  # abandoned: the watchdog ended the job and a new worker took this one's place; touch nothing
            visit.leave = left
            if failure is not None:
                self._fail(job, lane, failure)
                continue
            if not isinstance(item, dict):
                self._fail(job, lane, TypeError(f"returned {type(item).__name__}; a stage returns the item (a "
                                                "dict)"))
                continue
            job.item = item
            self._route(job, k)

    def _route(self, job: Job, k: int) -> None:
        target = job.item.pop("route", None)
        if target is None:
            if k + 1 < len(self.lanes):
                self._enqueue(job, k + 1)
            else:
                self.end(job)
            return
        name = self.lanes[k].spec.name
        nxt = self.by_name.get(target)
        if nxt is None or nxt > k:
            self.end(job, StageError(name, f"route {target!r} is not this stage or an earlier one", job.index))
            return
        visits = job.counts().get(target, 0)
        if visits >= self.lanes[nxt].spec.max_visits:
            self.end(job, StageError(target, f"visit {visits + 1} would pass max_visits "
                                     f"{self.lanes[nxt].spec.max_visits} (routed back by {name!r})", job.index))
            return
        self._enqueue(job, nxt)

    def _watchdog(self) -> None:
        while not self._stop.wait(WATCH_S):
            now = time.perf_counter()
            with self._calls_lock:
                late = [(wid, c) for wid, c in self._calls.items() if c[2] <= now]
                for wid, (_job, k, _) in late:
                    del self._calls[wid]
                    self.lanes[k].workers -= 1
            for _wid, (job, k, _deadline) in late:
                lane = self.lanes[k]
                job.visits[-1].leave = now
                self._spawn(k)  # the stuck worker is abandoned; the stage keeps its number of workers
                self.end(job, StageError(lane.spec.name, f"past its deadline of {lane.spec.timeout_s:g} s "
                                         "(timeout_s); the call was abandoned", job.index))
