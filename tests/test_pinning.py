"""Core pinning: the cores split into disjoint groups, and a framework's thread pool created under a pinned
thread inherits the mask (checked on the real ONNX Runtime session of the demo model)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mlharness.errors import SettingsError
from mlharness.loadgen.pinning import core_sets, pinned
from mlharness.manifest.loader import load_manifest
from mlharness.run.factory import Instances, make_instances, resolve_model_file


def test_core_sets_split_evenly_and_disjoint():
    assert core_sets(2, [0, 1, 2, 3, 4]) == [{0, 1, 2}, {3, 4}]
    assert core_sets(1, [5, 7]) == [{5, 7}]
    assert core_sets(3, [0, 1, 2]) == [{0}, {1}, {2}]
    with pytest.raises(SettingsError, match="3 instances cannot each have a core of their own on 2"):
        core_sets(3, [0, 1])


def _allowed(tid: str) -> str | None:
    try:
        for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    except FileNotFoundError:  # the thread ended meanwhile
        return None
    return None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not Path("/proc/self/task").is_dir(),
                    reason="needs two usable cores and Linux /proc")
def test_framework_threads_inherit_the_pinned_mask(tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MLHARNESS_DEMO_DIR", str(tmp_path / "demo"))
    before_mask = os.sched_getaffinity(0)
    last = max(before_mask)
    loaded = load_manifest("demo")
    before = set(os.listdir("/proc/self/task"))
    predictors = make_instances(loaded, Instances(threads=2, affinity=[{last}]), resolve_model_file(loaded), 8)
    try:
        # the framework's native threads: mlharness's own Python threads (the hook watchdog) are not pinned
        python_threads = {str(t.native_id) for t in threading.enumerate()}
        new = set(os.listdir("/proc/self/task")) - before - python_threads
        masks = {t: _allowed(t) for t in new}
        masks = {t: m for t, m in masks.items() if m is not None}
        assert masks, "ONNX Runtime started no intra-op threads (threads=2 should start one)"
        assert set(masks.values()) == {str(last)}, masks
        assert os.sched_getaffinity(0) == before_mask  # the creating thread's own mask is restored
    finally:
        for p in predictors:
            p.close()


def test_pinned_restores_the_mask_after_an_error():
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError), pinned({min(before)}):
        assert os.sched_getaffinity(0) == {min(before)}
        raise RuntimeError("boom")
    assert os.sched_getaffinity(0) == before


class _Recorder:
    """A pipeline that records the cores of the thread running each of its batches."""

    def __init__(self):
        self.seen: set[frozenset[int]] = set()

    def run(self, indices):
        self.seen.add(frozenset(os.sched_getaffinity(0)))

    def warmup(self, indices, n):
        self.run(indices)


class _Loader:
    on_progress = None

    def load(self, indices):
        pass

    def unload(self, indices):
        pass


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_calibration_times_each_instance_on_the_cores_its_runner_gets():
    import mlperf_loadgen as lg

    from mlharness.calibration.calibrate import calibrate

    settings = lg.TestSettings()
    settings.min_duration_ms, settings.min_query_count = 100, 1
    before = os.sched_getaffinity(0)
    groups = core_sets(2)
    pipelines = [_Recorder(), _Recorder()]
    calibrate("Offline", settings, pipelines, _Loader(), 16, 2, budget_s=0.05, affinity=groups)
    assert [p.seen for p in pipelines] == [{frozenset(groups[0])}, {frozenset(groups[1])}]
    assert os.sched_getaffinity(0) == before  # the calling thread's own mask is given back
