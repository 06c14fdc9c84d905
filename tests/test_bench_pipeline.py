"""scripts/bench_pipeline.py's served mode (retrieval and rerank on the CPU, generation served by a stand-in
accelerator with bounded slots) runs end to end, and a stage's ``threads`` reaches its workers. No timing is
asserted: the figures are the bench's to print, on whatever host it runs."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mlharness.errors import ManifestError
from mlharness.kinds.pipeline.flow import Flow, Job, Lane
from mlharness.kinds.pipeline.settings import stage_specs
from mlharness.kinds.pipeline.stage import StageSpec

ROOT = Path(__file__).resolve().parents[1]


def test_the_served_bench_runs_every_stage_and_the_server_keeps_its_slots(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_pipeline.py"), "--served", "--samples", "12",
                          "--service-ms", "40", "--slots", "3", "--tokens", "6"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    for stage, framework in (("retrieve", "retrieval"), ("rerank", "rerank"), ("generate", "openai")):
        assert re.search(rf"stage {stage}\s+{framework}, \d+ workers: 12 calls, 0 errors", text), text
    assert "sleeps rather than computes" in text and "(goal >= 0.9)" in text
    seen = int(re.search(r"3 at once \(at most (\d+) seen\)", text).group(1))
    assert 1 <= seen <= 3  # the server never streamed more answers at once than its slots
    assert re.search(r"each stage alone: retrieve [\d.]+/s.*rerank [\d.]+/s.*generate [\d.]+/s", text), text


class _Threads:
    name = "probe"

    def __init__(self):
        self.seen: list[int] = []

    def run(self, item):
        import torch

        self.seen.append(torch.get_num_threads())
        return item


@pytest.mark.parametrize("threads", [1, 3])
def test_a_stages_threads_are_its_workers_torch_threads(threads):
    stage, done = _Threads(), threading.Event()
    flow = Flow([Lane(StageSpec("probe", "toy-stage", workers=2, threads=threads), stage)],
                lambda job: done.set() if job.index == 3 else None)
    flow.start()
    for i in range(4):
        flow.submit(Job(i, i, {}))
    assert done.wait(10)
    flow.stop()
    assert stage.seen and set(stage.seen) == {threads}


def test_threads_in_a_manifest_is_checked_and_kept():
    specs = stage_specs({"stages": [{"name": "a", "framework": "toy-stage", "threads": 2}]}, "m.yaml")
    assert specs[0].threads == 2
    assert stage_specs({"stages": [{"name": "a", "framework": "toy-stage"}]}, "m.yaml")[0].threads is None
    with pytest.raises(ManifestError, match=r"stages\[0\]\.threads"):
        stage_specs({"stages": [{"name": "a", "framework": "toy-stage", "threads": 0}]}, "m.yaml")
