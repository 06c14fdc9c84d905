"""The pipeline SUT's overlap, measured: a 3-stage pipeline of toy stages of unequal cost (sleeps, which release
the GIL as FAISS, torch or an HTTP client do) against its slowest stage run alone, the same samples through both.
Stages of different samples overlap, so the pipeline should sustain nearly the slowest stage's rate (goal: at
least 0.9 x). Prints the per-stage breakdown (mlharness run's rows) and the two throughputs.

``--real``: real stages instead: retrieval (the tiny random e5-like embedder and a FAISS HNSW index over the
synthetic e2e-rag corpus, built in a temporary folder), ColBERT MaxSim reranking (the tiny random reranker) and a
CPU-bound stand-in generator (torch matmuls, which release the GIL as a model's forward does), each stage's
workers as a manifest would set them; the slowest stage (by its measured bound) is then played alone on the
items the pipeline handed it.

    .venv/bin/python scripts/bench_pipeline.py [--samples 600] [--real]
"""

from __future__ import annotations

import argparse
import os
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


class MatmulGenerate:
    """A CPU-bound stand-in generator: ``steps`` matmuls of a ``size`` square per sample (torch releases the GIL)."""

    def __init__(self, spec: StageSpec, ctx: StageContext):
        self.spec, self.name = spec, spec.name
        self.steps, self.size = int(spec.options.get("steps", 8)), int(spec.options.get("size", 128))

    def load(self) -> None:
        import torch

        self.w = torch.randn(self.size, self.size) / self.size ** 0.5

    def run(self, item: dict) -> dict:
        import torch

        x = torch.ones(1, self.size)
        for _ in range(self.steps):
            x = torch.tanh(x @ self.w)
        item["answer"] = f"{float(x.sum()):.4f}"
        return item

    def close(self) -> None:
        pass

    def describe(self) -> dict:
        return {"steps": self.steps, "size": self.size}


def play(specs: list[StageSpec], n: int, stages: dict | None = None,
         items: list[dict] | None = None) -> tuple[list[Lane], list[Job], list[float]]:
    ctx = StageContext(manifest_dir=Path.cwd(), cache_dir=Path(tempfile.gettempdir()))
    lanes = [Lane(s, stages[s.name] if stages else ToyStage(s, ctx)) for s in specs]
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
        flow.submit(Job(i, i, dict(items[i % len(items)]) if items else {"index": i}))
    done.wait(600)
    wall = [t0, time.perf_counter()]
    flow.stop()
    return lanes, jobs, wall


def real(n: int, tmp: Path) -> None:
    from mlharness.pipeline.models import ensure_random_embedder, ensure_random_reranker
    from mlharness.pipeline.settings import builtin_stages
    from mlharness.tasks.e2e_rag.dataset import read_frames
    from mlharness.tasks.e2e_rag.synth import write_synthetic_frames

    write_synthetic_frames(tmp / "data", count=32)
    ctx = StageContext(manifest_dir=tmp, cache_dir=tmp / "cache")
    specs = [StageSpec("retrieve", "retrieval", {"corpus": str(tmp / "data" / "doc_html"), "top_k": 10},
                       model={"graph_path": str(ensure_random_embedder(tmp / "embedder"))}, workers=2),
             StageSpec("rerank", "rerank", {"top_k": 5}, model={"graph_path": str(ensure_random_reranker(tmp / "rr"))},
                       workers=2),
             StageSpec("generate", "matmul", {"steps": 40, "size": 256}, workers=2)]
    registry = builtin_stages()
    stages = {s.name: (MatmulGenerate(s, ctx) if s.framework == "matmul" else registry[s.framework](s, ctx))
              for s in specs}
    for stage in stages.values():
        stage.load()
    items = [q.first_item() for q in read_frames(tmp / "data")]
    play(specs, min(n, 32), stages, items)  # warm every worker's first call (torch's thread pools)
    lanes, jobs, wall = play(specs, n, stages, items)
    summary = write_reports(tmp, lanes, jobs, wall)
    for label, text in stage_rows(tmp):
        print(f"{label:>16}  {text}")
    slow = min(summary["stages"], key=lambda st: st["bound_per_s"])
    k = [s.name for s in specs].index(slow["stage"])
    # the slowest stage alone, on what the pipeline handed it (the items as they left the stage before)
    handed = items if k == 0 else [dict(j.item) for j in jobs][:64]  # a later stage: items that passed the ones before
    play([specs[k]], min(n, 32), stages, handed)
    _, alone_jobs, alone_wall = play([specs[k]], n, stages, handed)
    alone = len(alone_jobs) / (alone_wall[1] - alone_wall[0])
    print(f"pipeline of {len(specs)} real stages: {summary['throughput']:.1f} samples/s over {n} samples; slowest "
          f"stage ({slow['stage']}, {specs[k].workers} workers) alone: {alone:.1f} samples/s; ratio "
          f"{summary['throughput'] / alone:.3f} (goal >= 0.9)")
    per_sample_ms = sum(st["latency_ms"]["mean"] for st in summary["stages"])
    cores = len(os.sched_getaffinity(0))
    print(f"the stages' calls take {per_sample_ms:.1f} ms a sample together (while sharing the machine) on {cores} "
          f"cores: CPU-bound stages compete for the same cores, which the slowest stage alone does not")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--real", action="store_true", help="retrieval, rerank and a CPU-bound generator")
    args = ap.parse_args()
    n = args.samples
    if args.real:
        with tempfile.TemporaryDirectory() as tmp:
            real(n, Path(tmp))
        return
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
