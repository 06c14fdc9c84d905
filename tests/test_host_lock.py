"""Runs an executor starts take turns on their physical host: two runs started at once through the code path every
executor shares (:class:`mlharness.cluster.child.ChildRun`, what a Ray task and the local backend run) do not
overlap in time, as their LoadGen logs show, and the one that waited says once what it waited for; with
``share_host`` (``--share-host``) they run together. The lock lives in the run's cache root, so this test's runs
(a cache of their own) wait for nothing else on the machine."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from mlharness.cluster.child import ChildResult, ChildRun
from mlharness.cluster.hostlock import LOCK_FILE, HostTurn
from mlharness.cluster.jobs import RunJob
from tests.helpers.ray_cluster import toy_manifest

WAITS = "waits for its turn on this host"
_TIME_MS = re.compile(r'"time_ms":\s*([0-9.]+)')


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("MLHARNESS_CACHE", str(path))
    return path


def job(key: str, share_host: bool, ms: int) -> RunJob:
    """A SingleStream run of the echo toy that LoadGen keeps going for ``ms`` milliseconds."""
    return RunJob(key=key, dest=f"sys/{key}", share_host=share_host,
                  argv=("run", "--manifest", "turns.yaml", "--scenario", "SingleStream", "--mode", "performance",
                        "--count", "16", "--min-duration-ms", str(ms), "--min-query-count", "1", "--target-latency-ms", "1",
                        "--no-progress", "--telemetry-interval-ms", "0"),
                  files=(("turns.yaml", toy_manifest("turns", sleep_ms=2).encode()),))


def two_at_once(tmp_path: Path, share_host: bool, ms: int) -> list[ChildResult]:
    results: list[ChildResult | None] = [None, None]
    children = [ChildRun(job(f"run{i}", share_host, ms), tmp_path / f"work{i}", {}) for i in range(2)]

    def go(i: int) -> None:
        results[i] = children[i].run()

    threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a run did not end within 120 s"
    for r in results:
        assert r is not None and r.rc == 0, (r, r.console.read_text() if r else "")
    return results  # type: ignore[return-value]


def loadgen_span(folder: Path) -> tuple[float, float]:
    """When LoadGen's test started and ended (UNIX seconds), from its detail log: its last write ends the test,
    and its events' ``time_ms`` count from the test's start."""
    detail = folder / "mlperf_log_detail.txt"
    end = detail.stat().st_mtime
    last_ms = max(float(m.group(1)) for m in _TIME_MS.finditer(detail.read_text()))
    assert json.loads((folder / "mlharness_run.json").read_text())["scenario"] == "SingleStream"
    return end - last_ms / 1000, end


def test_two_runs_started_at_once_take_turns_on_the_host(tmp_path, cache):
    first, second = sorted(two_at_once(tmp_path, share_host=False, ms=1500),
                           key=lambda r: loadgen_span(r.folder)[0])
    (s1, e1), (s2, e2) = loadgen_span(first.folder), loadgen_span(second.folder)
    assert e1 - s1 >= 1.4 and e2 - s2 >= 1.4
    assert s2 >= e1, f"LoadGen tests overlapped: {s1:.3f}..{e1:.3f} and {s2:.3f}..{e2:.3f}"
    # the one that waited said so once, naming the run it waited for; the other never waited
    said = second.console.read_text()
    assert said.count(WAITS) == 1 and "mlharness job run" in said and str(cache / LOCK_FILE) in said, said
    assert WAITS not in first.console.read_text()


def test_with_share_host_the_runs_overlap(tmp_path, cache):
    results = two_at_once(tmp_path, share_host=True, ms=2500)
    (s1, e1), (s2, e2) = (loadgen_span(r.folder) for r in results)
    assert max(s1, s2) < min(e1, e2), f"LoadGen tests did not overlap: {s1:.3f}..{e1:.3f} and {s2:.3f}..{e2:.3f}"
    assert all(WAITS not in r.console.read_text() for r in results)


def test_a_run_stopped_while_it_waits_never_starts_and_the_turn_passes_on(tmp_path, cache):
    holder = HostTurn("mlharness job holding")
    assert holder.take(lambda text: None)
    child = ChildRun(job("waiting", False, 100), tmp_path / "work", {})
    result: dict[str, ChildResult] = {}
    t = threading.Thread(target=lambda: result.update(r=child.run()), daemon=True)
    t.start()
    console = tmp_path / "work" / "console.log"
    for _ in range(200):
        if console.is_file() and WAITS in console.read_text():
            break
        t.join(0.05)
    assert "mlharness job holding (pid" in console.read_text()  # what it waits for, as the holder wrote it
    child.stop()
    t.join(10)
    assert not t.is_alive()
    r = result["r"]
    assert r.rc is None and r.stopped and r.folder is None and "turn on the host" in r.error
    assert "$ " not in console.read_text()  # its process was never started
    holder.release()
    again = HostTurn("next")
    assert again.take(lambda text: pytest.fail(f"waited for a released turn: {text}"))
    again.release()
