"""The pipeline SUT's overlap, measured: a 3-stage pipeline of toy stages of unequal cost (sleeps, which release
the GIL as FAISS, torch or an HTTP client do) against its slowest stage run alone, the same samples through both.
Stages of different samples overlap, so the pipeline should sustain nearly the slowest stage's rate (goal: at
least 0.9 x). Prints the per-stage breakdown (mlharness run's rows) and the two throughputs.

    .venv/bin/python scripts/bench_pipeline.py [--samples 600]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from mlharness.loadgen.pipeline_report import stage_rows, write_reports
from mlharness.pipeline.flow import Flow, Job, Lane
from mlharness.pipeline.stage import StageContext, StageSpec
from mlharness.pipeline.toy import ToyStage

STAGES = [StageSpec("retrieve", "toy-stage", {"delay_ms": 2.0}, workers=2),
          StageSpec("rerank", "toy-stage", {"delay_ms": 3.0}, workers=1),  # the slowest: 333 samples/s at most
          StageSpec("generate", "toy-stage", {"delay_ms": 8.0}, workers=4)]


def play(specs: list[StageSpec], n: int) -> tuple[list[Lane], list[Job], list[float]]:
    ctx = StageContext(manifest_dir=Path.cwd(), cache_dir=Path(tempfile.gettempdir()))
    lanes = [Lane(s, ToyStage(s, ctx)) for s in specs]
    left, done, jobs = [n], threading.Event(), []
    lock = threading.Lock()

    def on_done(job: Job) -> None:
        with lock:
            jobs.append(job)
            left[0] -= 1
            if left[0] == 0:
                done.set()

    flow = Flow(lanes, on_done)
    flow.start()
    t0 = time.perf_counter()
    for i in range(n):
        flow.submit(Job(i, i, {"index": i}))
    done.wait(600)
    wall = [t0, time.perf_counter()]
    flow.stop()
    return lanes, jobs, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=600)
    n = ap.parse_args().samples
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        lanes, jobs, wall = play(STAGES, n)
        summary = write_reports(out, lanes, jobs, wall)
        for label, text in stage_rows(out):
            print(f"{label:>16}  {text}")
        slow = min(STAGES, key=lambda s: s.workers / s.options["delay_ms"])
        _, alone_jobs, alone_wall = play([slow], n)
        alone = len(alone_jobs) / (alone_wall[1] - alone_wall[0])
    print(f"pipeline of {len(STAGES)} stages: {summary['throughput']:.1f} samples/s over {n} samples; slowest stage "
          f"({slow.name}) alone: {alone:.1f} samples/s; ratio {summary['throughput'] / alone:.3f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
