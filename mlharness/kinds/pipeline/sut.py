"""The SUT of a pipeline model (``response.kind: pipeline``): one LoadGen sample flows through the manifest's stages.

The ``preprocess`` hook makes each sample's first item at load time, untimed (kept in the store as a 0-d object
cell). LoadGen issues a sample; the SUT hands a copy of its item to the stages' worker pools
(:class:`~mlharness.kinds.pipeline.flow.Flow`: stages of different samples overlap, routes go back bounded by
``max_visits``, each call bounded by its stage's ``timeout_s``). When the last stage is done, ``postprocess`` (when
the manifest has one) makes ``response``, ``n_tokens`` and ``result`` from the last item, and the sample completes
with ``response`` in ``response.element_type`` (and its token count where set).

A failing stage fails only its sample: the SUT records ``{stage, sample, error}``, completes the sample empty at
once and goes on; at the end the run fails (exit 3) naming the first failing stage and sample and how many failed.
A signal drains the SUT: every open sample and every later one completes empty at once (its record says
``drained`` and carries no ``result``, even where its stages had finished). Every LoadGen sample
completes exactly once. Beside LoadGen's logs: ``pipeline_results.jsonl`` (per sample: index, query id, the item's
``result``, each stage visit's times, the error) and ``pipeline_summary.json`` (kinds/pipeline/report.py).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import RunFailed
from mlharness.kinds.pipeline.flow import Flow, Job, Lane
from mlharness.kinds.pipeline.report import write_reports
from mlharness.kinds.pipeline.stage import StageError, begin_test
from mlharness.loadgen.completion import Completions
from mlharness.loadgen.qsl import SampleLoader, SampleStore
from mlharness.loadgen.sut import run_fast_sut

log = logging.getLogger(__name__)


def stage_hook(source: str | None, name: str, manifest: str, where: str, namespace: dict[str, Any]) -> Any:
    """A stage's ``before``/``after`` source compiled in the manifest's hook namespace (its globals: what the
    dataset and model hooks define), as ``item -> item``; None without one."""
    if not source or not source.strip():
        return None
    import linecache

    from mlharness.errors import ManifestError

    filename = f"{manifest}::{where}"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace.pop(name, None)  # each stage's hook is taken right after its source runs in the shared globals
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the manifest's hook is the point
    except Exception as e:  # noqa: BLE001 - named with its field
        raise ManifestError(manifest, where, f"{type(e).__name__}: {e}") from None
    fn = namespace.pop(name, None)
    if not callable(fn):
        raise ManifestError(manifest, where, f"the hook's source must define a function named '{name}'")
    ctx = namespace.get("ctx", {})
    return lambda item: fn(ctx, item)


def attach_hooks(lanes: list[Lane], hooks: Any, where: str = "inputs[0].parameters.stages") -> None:
    for k, lane in enumerate(lanes):
        for name in ("before", "after"):
            setattr(lane, name, stage_hook(getattr(lane.spec, name), name, hooks.manifest, f"{where}[{k}].{name}",
                                           hooks.namespace))


class _Local:
    """A calibration play's token: counts its jobs down."""

    def __init__(self, n: int):
        self.left, self.lock, self.done, self.errors = n, threading.Lock(), threading.Event(), []


class PipelineSUT(Completions):
    failure_label = "a pipeline stage"

    def __init__(self, lanes: list[Lane], store: SampleStore, hooks: Any, ctx: dict[str, Any], dtype: np.dtype,
                 outdir: Path | None = None, on_failure: Any = None):
        super().__init__(on_failure)
        self.lanes, self.store, self.hooks, self.ctx, self.dtype, self.outdir = lanes, store, hooks, ctx, dtype, outdir
        self.flow = Flow(lanes, self._done)
        self.jobs: list[Job] = []  # completed LoadGen samples, in completion order
        self.failures: list[StageError] = []
        self._open: dict[int, Job] = {}
        self._open_lock = threading.Lock()
        self._wall: list[float] = []
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self.flow.start()

    # -- items -------------------------------------------------------------------------------------------------
    def item_at(self, index: int) -> dict[str, Any]:
        cell = self.store.gather(np.asarray([index], dtype=np.int64))[0][0]
        return dict(cell)

    def finish_item(self, job: Job) -> tuple[np.ndarray, int | None]:
        """``postprocess`` (when defined) on the last item, and the response LoadGen is handed; whatever fails in
        finishing (the hook, a response not in ``response.element_type``, a token count that is no integer) fails
        the sample naming postprocess, so it is completed like any failed sample."""
        try:
            return self._finish(job)
        except StageError:
            raise
        except Exception as e:  # noqa: BLE001 - the sample fails naming what finishes it
            raise StageError("postprocess", f"{type(e).__name__}: {e}", job.index) from e

    def _finish(self, job: Job) -> tuple[np.ndarray, int | None]:
        item = job.item
        if "postprocess" in self.hooks:
            try:
                out = self.hooks.call("postprocess", self.ctx, item)
            except Exception as e:  # noqa: BLE001 - the sample fails naming the hook
                raise StageError("postprocess", str(e), job.index) from e
            if isinstance(out, dict):
                item = job.item = out
        if "response" not in item:
            raise StageError("postprocess", "the last item has no 'response' (what LoadGen is handed); the last "
                             "stage or the postprocess hook sets it", job.index)
        data = np.ascontiguousarray(np.asarray(item["response"]).astype(self.dtype, copy=False).ravel())
        n = item.get("n_tokens")
        return data, None if n is None else int(n)

    # -- LoadGen callbacks ---------------------------------------------------------------------------------------
    def issue(self, ids: list[int], indices: list[int]) -> None:
        self._count_issued(len(ids))
        for i, x in zip(ids, indices, strict=True):
            job = Job(int(i), int(x), {})
            if self.halted:
                self.complete_one(job.token, None, None, "a pipeline sample")
                continue
            try:
                job.item = self.item_at(int(x))
            except Exception as e:  # noqa: BLE001 - this sample fails; the batch's others go on
                self.flow.end(job, StageError("preprocess", f"the sample's item could not be read: "
                                              f"{type(e).__name__}: {e}", job.index))
                continue
            with self._open_lock:
                self._open[int(i)] = job
            self.flow.submit(job)

    def flush(self) -> None:
        pass

    def drain(self, interrupted: Any) -> None:
        super().drain(interrupted)
        with self._open_lock:
            left = list(self._open.values())
        for job in left:
            self.flow.end(job, StageError("drain", "interrupted", job.index))

    def _done(self, job: Job) -> None:
        if isinstance(job.token, _Local):
            self._done_local(job)
            return
        data = n = None
        try:  # LoadGen waits for every sample: whatever happens here, the sample is completed (finally)
            with self._open_lock:
                self._open.pop(int(job.token), None)
            if job.error is None and self.halted:
                job.drained = True  # LoadGen gets it empty: no result of it may be scored
            elif job.error is None:
                try:
                    data, n = self.finish_item(job)
                except StageError as e:
                    job.error = e
            if job.error is not None and job.error.stage == "drain":
                job.drained = True
            elif job.error is not None:
                with self._count_lock:
                    self.failures.append(job.error)
                log.error("%s", job.error)
            self.jobs.append(job)
        finally:
            self.complete_one(job.token, data, n, "a pipeline sample")

    # -- outside LoadGen (warm-up, calibration) ----------------------------------------------------------------
    def _done_local(self, job: Job) -> None:
        token = job.token
        with token.lock:
            try:
                if job.error is None:
                    try:
                        self.finish_item(job)
                    except StageError as e:
                        job.error = e
            finally:  # the play waits for every job: counted down whatever happened
                if job.error is not None:
                    token.errors.append(job.error)
                token.left -= 1
                if token.left == 0:
                    token.done.set()

    def play(self, indices: list[int], timeout_s: float | None = None) -> list[Job]:
        """Play samples (loaded) through the stages together, outside LoadGen; raises the first failure."""
        self.start()
        token = _Local(len(indices))
        jobs = [Job(token, int(x), self.item_at(int(x))) for x in indices]
        for job in jobs:
            self.flow.submit(job)
        if not token.done.wait(timeout_s):
            raise RunFailed(f"playing {len(indices)} samples through the pipeline took over {timeout_s:g} s")
        if token.errors:
            raise token.errors[0]
        return jobs

    def begin_test(self) -> None:
        """Every stage's optional ``begin_test`` (stage.py), in the stages' order; one that raises fails the run
        naming its stage."""
        for lane in self.lanes:
            try:
                begin_test(lane.stage)
            except Exception as e:  # noqa: BLE001 - named with its stage
                raise StageError(lane.spec.name, f"begin_test: {type(e).__name__}: {e}") from e

    # -- one LoadGen test ----------------------------------------------------------------------------------------
    def _end(self) -> None:
        self._end_test()
        self._wall.append(time.perf_counter())

    def run_test(self, loader: SampleLoader, total_count: int, performance_count: int, settings: Any,
                 log_settings: Any, audit_config: str, warmup: int = 0) -> None:
        import mlperf_loadgen as lg

        self._lg = lg
        self.start()

        def warm(indices: list[int]) -> None:
            """Untimed plays of the first loaded sample; one that fails is said, not the run's failure: the sample
            fails again in the test, where it is recorded with its stage, and the other samples go on. Then each
            stage's ``begin_test`` (after warm-up and calibration, before LoadGen's first query)."""
            for _ in range(max(0, warmup)):
                try:
                    self.play([int(indices[0])], sum(lane.spec.timeout_s for lane in self.lanes) * 2)
                except (StageError, RunFailed) as e:
                    log.warning("warming up the pipeline: %s", e)
                    break
            self.begin_test()

        try:
            self._wall.append(time.perf_counter())
            run_fast_sut(self, loader, total_count, performance_count, settings, log_settings, audit_config,
                         self.issue, self.flush, warm, on_end=self._end)
        finally:
            self.flow.stop()
            if self.outdir is not None:
                write_reports(self.outdir, self.lanes, self.jobs, self._wall)
        if self.failures and self.error is None:
            first = self.failures[0]
            self.error = RunFailed(f"stage {first.stage!r} failed sample {first.sample}: {first.detail} "
                                   f"({len(self.failures)} of {len(self.jobs)} samples failed)")
        self._raise_if_failed()
