"""The executors: jobs run as real `mlharness` processes, land in one results tree, name their node; faults.

The local backend runs here as it does for users. The Ray backend runs on a Ray cluster of three nodes started on
this host (``ray.cluster_utils.Cluster``, bound to 127.0.0.1), with custom resources standing in for accelerators:
node A offers ``accel_a``, node B ``accel_b``, node C neither. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from mlharness.cluster.jobs import Constraints, RunJob
from mlharness.cluster.local import LocalExecutor
from mlharness.paths import MANIFESTS_DIR

# the fastest real run: the demo model, 16 samples, accuracy mode (about a second)
FAST = ("run", "--manifest", "demo", "--scenario", "Offline", "--mode", "accuracy", "--count", "16",
        "--no-progress")


def slow_argv(seconds: float) -> tuple[str, ...]:
    """A performance run LoadGen keeps going for ``seconds`` (a run to cancel or to kill the node under)."""
    return ("run", "--manifest", "demo", "--scenario", "SingleStream", "--mode", "performance", "--count", "16",
            "--min-duration-ms", str(int(seconds * 1000)), "--min-query-count", "1", "--no-progress")


def failing_manifest() -> bytes:
    """The demo manifest whose postprocess raises on its second batch: the run fails after LoadGen started, so
    it leaves partial logs."""
    text = (MANIFESTS_DIR / "demo" / "demo.yaml").read_text()
    old = "  def postprocess(ctx, outputs):\n"
    assert text.count(old) == 1
    return text.replace(old, "  CALLS = [0]\n\n" + old + "      CALLS[0] += 1\n      if CALLS[0] >= 2:\n"
                        "          raise ValueError(\"boom on purpose\")\n").encode()


FAILING = RunJob(key="failing", dest="sys/failing/Offline/accuracy",
                 argv=("run", "--manifest", "demo_failing.yaml", "--scenario", "Offline", "--mode", "accuracy",
                       "--count", "64", "--no-progress"),
                 files=(("demo_failing.yaml", failing_manifest()),))


def metadata(folder: Path) -> dict:
    return json.loads((folder / "mlharness_run.json").read_text())


def children_of_mlharness(marker: str) -> list[int]:
    """Processes still running an `mlharness.cli` command whose output path contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mlharness.cli" in cmd and any(marker.encode() in part for part in cmd):
            found.append(int(pid))
    return found


@pytest.fixture(autouse=True)
def _cache(shared_cache, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))  # the demo model generated once per session


# -- local -------------------------------------------------------------------------------------------------------
def test_local_runs_jobs_in_order_lands_them_and_names_the_node(tmp_path):
    ex = LocalExecutor()
    node = ex.nodes()[0]
    assert node.facts["cpu_count"] and node.facts["frameworks"].get("onnxruntime")
    assert ex.matching(Constraints(accelerator="accel_a")) == []
    jobs = [RunJob(key=f"k{i}", argv=FAST, dest=f"sys/demo/Offline/accuracy{i}") for i in range(2)]
    jobs.append(RunJob(key="nowhere", argv=FAST, dest="sys/demo/nowhere", constraints=Constraints(accelerator="x")))
    done = []
    outcomes = ex.run_all(jobs, tmp_path, on_done=done.append)
    assert [o.job.key for o in outcomes] == ["k0", "k1", "nowhere"] == [o.job.key for o in done]
    for o in outcomes[:2]:
        assert o.ok and o.rc == 0 and o.folder == tmp_path / o.job.dest, o.error
        md = metadata(o.folder)
        assert md["executor"] == {"backend": "local", "node_id": node.node_id, "node_address": "localhost"}
        assert (o.folder / "mlperf_log_accuracy.json").is_file()
    assert outcomes[0].finished_unix <= outcomes[1].started_unix  # one at a time
    assert not outcomes[2].ok and "no node meets" in outcomes[2].error and "1 × x" in outcomes[2].error
    assert not list(tmp_path.glob(".mlharness-job-*"))  # the working folders are gone


def test_local_never_replaces_a_result_and_skips_when_asked(tmp_path):
    dest = tmp_path / "sys/demo/acc"
    dest.mkdir(parents=True)
    (dest / "mine.txt").write_text("earlier")
    job = RunJob(key="k", argv=FAST, dest="sys/demo/acc")
    [o] = LocalExecutor().run_all([job], tmp_path)
    assert not o.ok and o.rc is None and str(dest) in o.error and "never replaced" in o.error
    [o] = LocalExecutor(skip_existing=True).run_all([job], tmp_path)
    assert o.ok and o.skipped and o.folder == dest
    assert (dest / "mine.txt").read_text() == "earlier" and sorted(p.name for p in dest.iterdir()) == ["mine.txt"]
    [o] = LocalExecutor().run_all([RunJob(key="bad", argv=FAST, dest="../escape")], tmp_path)
    assert not o.ok and "'..'" in o.error


def test_local_failed_run_keeps_partial_logs_as_failed_folder(tmp_path):
    [o] = LocalExecutor().run_all([FAILING], tmp_path)
    assert not o.ok and o.rc not in (0, None)
    assert "boom on purpose" in o.error and "on node local:" in o.error
    assert not (tmp_path / FAILING.dest).exists()
    assert o.folder.name.startswith("accuracy.failed-") and o.folder.parent == (tmp_path / FAILING.dest).parent
    assert "boom on purpose" in (o.folder / "console.log").read_text()
    assert (o.folder / "mlperf_log_detail.txt").is_file()  # LoadGen had started: its partial log came back


def test_local_cancel_stops_the_run_within_seconds(tmp_path):
    ex = LocalExecutor()
    jobs = [RunJob(key="long", argv=slow_argv(60), dest="sys/long"), RunJob(key="next", argv=FAST, dest="sys/next")]
    result = {}
    t = threading.Thread(target=lambda: result.update(out=ex.run_all(jobs, tmp_path)), daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not children_of_mlharness(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert children_of_mlharness(str(tmp_path)), "the run never started"
    time.sleep(1.0)
    cancelled = time.monotonic()
    ex.cancel()
    t.join(15)
    assert not t.is_alive() and time.monotonic() - cancelled < 8
    assert not children_of_mlharness(str(tmp_path))
    long, nxt = result["out"]
    assert not long.ok and "stopped" in long.error and long.folder.name.startswith("long.failed-")
    assert not nxt.ok and nxt.attempts == 0 and "cancelled" in nxt.error
    assert not (tmp_path / "sys/next").exists()
