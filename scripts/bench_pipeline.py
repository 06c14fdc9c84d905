"""The pipeline SUT's overlap, measured: a 3-stage pipeline of toy stages of unequal cost (sleeps, which release
the GIL as FAISS, torch or an HTTP client do) against its slowest stage run alone, the same samples through both.
Stages of different samples overlap, so the pipeline should sustain nearly the slowest stage's rate (goal: at
least 0.9 x). Prints the per-stage breakdown (mlharness run's rows) and the two throughputs.

``--served``: the e2e-rag deployment: retrieval (the tiny random e5-like embedder and a FAISS HNSW index over the
synthetic e2e-rag corpus, built in a temporary folder) and ColBERT MaxSim reranking (the tiny random reranker) on
this host's CPU, then an ``openai`` generation stage asking multi_shot_retrieval.py's answer prompt of a local
OpenAI-compatible server in another process (``mlharness.measurement.fake_openai --slots``) that stands in for an
accelerator: each answer streams ``--tokens`` tokens over ``--service-ms``, at most ``--slots`` at once, the
others waiting for a slot. It sleeps rather than computes, which is what an off-host device looks like to the host.
The slowest stage alone is the generation stage alone, same server, same workers, on the items the pipeline
handed it.

``--real``: everything on this host's CPU: retrieval, reranking and a CPU-bound stand-in generator (torch matmuls).
The stages compete for the same cores, which the slowest stage alone had to itself, so beside that ratio the bench
prints the bound reachable here: the cores over the stages' summed CPU time per sample (each stage played alone,
its process CPU time counted), or the slowest stage alone where that is lower.

    .venv/bin/python scripts/bench_pipeline.py [--samples 600] [--real | --served [--service-ms 400] [--slots 16]]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from mlharness.kinds.pipeline.flow import Flow, Job, Lane
from mlharness.kinds.pipeline.report import stage_rows, write_reports
from mlharness.kinds.pipeline.stage import StageContext, StageSpec
from mlharness.kinds.pipeline.toy import ToyStage

STAGES = [StageSpec("retrieve", "toy-stage", {"delay_ms": 2.0}, workers=2),
          StageSpec("rerank", "toy-stage", {"delay_ms": 3.0}, workers=1),  # the slowest: 333 samples/s at most
          StageSpec("generate", "toy-stage", {"delay_ms": 8.0}, workers=4)]
KEPT = 64  # items kept per stage as the pipeline handed them, to play that stage alone on


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


class Play:
    """One play of ``n`` samples through ``specs``: the lanes, the ended jobs, the wall clock [start, end], the
    process's CPU seconds (every thread) and, per stage, the first items as they were handed to it."""

    def __init__(self, specs: list[StageSpec], n: int, stages: dict | None = None, items: list[dict] | None = None,
                 befores: dict | None = None):
        ctx = StageContext(manifest_dir=Path.cwd(), cache_dir=Path(tempfile.gettempdir()))
        self.handed: dict[str, list[dict]] = {s.name: [] for s in specs}
        self.lanes = [Lane(s, stages[s.name] if stages else ToyStage(s, ctx), before=self._tap(s.name, befores))
                      for s in specs]
        left, done, self.jobs = [n], threading.Event(), []
        lock = threading.Lock()

        def on_done(job: Job) -> None:
            with lock:
                self.jobs.append(job)
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        flow = Flow(self.lanes, on_done)
        flow.start()
        cpu0, t0 = time.process_time(), time.perf_counter()
        for i in range(n):
            flow.submit(Job(i, i, dict(items[i % len(items)]) if items else {"index": i}))
        done.wait(600)
        self.wall, self.cpu_s = [t0, time.perf_counter()], time.process_time() - cpu0
        flow.stop()
        self.rate = len(self.jobs) / (self.wall[1] - self.wall[0])

    def _tap(self, name: str, befores: dict | None):
        kept, hook = self.handed[name], (befores or {}).get(name)

        def before(item: dict) -> dict:
            if len(kept) < KEPT:
                kept.append(dict(item))
            return hook(item) if hook else item

        return before


def rag_stages(tmp: Path, generate: StageSpec, threads: int | None) -> tuple[list[StageSpec], dict, list[dict]]:
    """Retrieval and rerank over the synthetic corpus (tiny random models), each worker with ``threads`` torch
    threads (None: torch's default, a thread per core), then ``generate``; built and loaded."""
    from mlharness.kinds.pipeline.models import ensure_random_embedder, ensure_random_reranker
    from mlharness.kinds.pipeline.predictor_stage import predictor_stage
    from mlharness.kinds.pipeline.settings import builtin_stages
    from mlharness.tasks.e2e_rag.dataset import read_frames
    from mlharness.tasks.e2e_rag.synth import write_synthetic_frames

    write_synthetic_frames(tmp / "data", count=32)
    ctx = StageContext(manifest_dir=tmp, cache_dir=tmp / "cache")
    specs = [StageSpec("retrieve", "retrieval", {"corpus": str(tmp / "data" / "doc_html"), "top_k": 10},
                       model={"graph_path": str(ensure_random_embedder(tmp / "embedder"))}, workers=2,
                       threads=threads),
             StageSpec("rerank", "rerank", {"top_k": 5}, model={"graph_path": str(ensure_random_reranker(tmp / "rr"))},
                       workers=2, threads=threads),
             generate]
    registry = builtin_stages()
    stages = {}
    for s in specs:
        make = MatmulGenerate if s.framework == "matmul" else registry.get(s.framework, predictor_stage)
        stages[s.name] = make(s, ctx)
        stages[s.name].load()
    return specs, stages, [q.first_item() for q in read_frames(tmp / "data")]


def breakdown(tmp: Path, play: Play) -> dict:
    summary = write_reports(tmp, play.lanes, play.jobs, play.wall)
    for label, text in stage_rows(tmp):
        print(f"{label:>16}  {text}")
    return summary


def alone(spec: StageSpec, stages: dict, handed: list[dict], n: int, befores: dict | None = None) -> Play:
    """``spec``'s stage alone on what the pipeline handed it: a warm-up play, then the timed one."""
    Play([spec], max(spec.workers, min(n, 32)), stages, handed, befores)
    return Play([spec], n, stages, handed, befores)


def real(n: int, tmp: Path, threads: int | None) -> None:
    generate = StageSpec("generate", "matmul", {"steps": 40, "size": 256}, workers=2, threads=threads)
    specs, stages, items = rag_stages(tmp, generate, threads)
    Play(specs, min(n, 32), stages, items)  # warm every worker's first call (torch's thread pools)
    pipe = Play(specs, n, stages, items)
    summary = breakdown(tmp, pipe)
    solo = {s.name: alone(s, stages, pipe.handed[s.name], n) for s in specs}
    slow = min(specs, key=lambda s: solo[s.name].rate)
    cores = len(os.sched_getaffinity(0))
    cpu_ms = {s.name: solo[s.name].cpu_s / n * 1e3 for s in specs}
    cpu_bound = cores / (sum(cpu_ms.values()) / 1e3)
    reachable = min(cpu_bound, solo[slow.name].rate)
    print("each stage alone: " + "; ".join(f"{s.name} {solo[s.name].rate:.1f}/s, {cpu_ms[s.name]:.2f} ms CPU a "
                                           "sample" for s in specs))
    print(f"pipeline of {len(specs)} real stages: {summary['throughput']:.1f} samples/s over {n} samples; slowest "
          f"stage ({slow.name}, {slow.workers} workers) alone: {solo[slow.name].rate:.1f} samples/s; ratio "
          f"{summary['throughput'] / solo[slow.name].rate:.3f} (goal >= 0.9)")
    print(f"reachable on {cores} cores: {cpu_bound:.1f} samples/s ({cores} cores over the stages' "
          f"{sum(cpu_ms.values()):.2f} ms of CPU a sample; the pipeline itself used {pipe.cpu_s / n * 1e3:.2f}); "
          f"bound min(that, slowest alone) {reachable:.1f}/s; ratio {summary['throughput'] / reachable:.3f}. "
          "CPU-bound stages share the cores, which the slowest stage alone had to itself")


def served(n: int, tmp: Path, service_ms: float, slots: int, tokens: int, threads: int | None) -> None:
    from mlharness.measurement.fake_openai import FakeOpenAI
    from mlharness.tasks.e2e_rag.hooks import answer_messages

    befores = {"generate": lambda item: {**item, "messages": answer_messages(item)}}
    with FakeOpenAI(tokens=tokens, delay_s=service_ms / 1e3 / (tokens + 1), slots=slots, model="accelerator") as srv:
        # tokens + 1 chunks (the role's, then one a token) paced by the server's delay: service_ms an answer
        generate = StageSpec("generate", "openai", {"endpoints": [srv.url], "model": "accelerator",
                                                    "generation": {"max_new_tokens": tokens}}, workers=slots,
                             timeout_s=60)
        specs, stages, items = rag_stages(tmp, generate, threads)
        Play(specs, max(slots, min(n, 32)), stages, items, befores)  # every worker's first call and connection
        pipe = Play(specs, n, stages, items, befores)
        summary = breakdown(tmp, pipe)
        solo = {s.name: alone(s, stages, pipe.handed[s.name], n, befores) for s in specs}
        stats = srv.stats()
        stages["generate"].close()
    cores = len(os.sched_getaffinity(0))
    bound = slots / (service_ms / 1e3)
    gen, slow = solo["generate"], min(specs, key=lambda s: solo[s.name].rate)
    print(f"the accelerator: a stand-in server in another process that sleeps rather than computes (as an off-host "
          f"device looks to this host): {tokens} tokens streamed over {service_ms:g} ms an answer, {slots} at once "
          f"(at most {stats['peak_streams']} seen), {bound:.1f} answers/s at most")
    print("each stage alone: " + "; ".join(f"{s.name} {solo[s.name].rate:.1f}/s, {solo[s.name].cpu_s / n * 1e3:.2f}"
                                           " ms of host CPU a sample" for s in specs))
    print(f"pipeline: retrieval and rerank on this host's {cores} cores, generation served: "
          f"{summary['throughput']:.1f} samples/s over {n} samples, {pipe.cpu_s / n * 1e3:.2f} ms of host CPU a "
          f"sample; slowest stage (generate, {slots} workers) alone: {gen.rate:.1f} samples/s; ratio "
          f"{summary['throughput'] / gen.rate:.3f} (goal >= 0.9)")
    if slow.name != "generate":
        print(f"the generator is not the slowest stage here: {slow.name} alone sustains {solo[slow.name].rate:.1f}/s "
              f"on this host (ratio {summary['throughput'] / solo[slow.name].rate:.3f}); raise --service-ms or lower "
              "--slots for the accelerator-bound deployment")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=600)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true", help="retrieval, rerank and a CPU-bound generator")
    mode.add_argument("--served", action="store_true", help="retrieval and rerank on the CPU, generation served by a "
                      "stand-in accelerator in another process")
    ap.add_argument("--service-ms", type=float, default=400.0, help="--served: the time of one answer")
    ap.add_argument("--slots", type=int, default=16, help="--served: answers at once (and generation workers)")
    ap.add_argument("--tokens", type=int, default=32, help="--served: tokens streamed an answer (at most 58)")
    ap.add_argument("--threads", type=int, default=1, help="--real, --served: the torch stages' threads a worker (the "
                    "stages' threads option; 0: torch's default, a thread per core in every worker)")
    args = ap.parse_args()
    n = args.samples
    with tempfile.TemporaryDirectory() as tmp:
        if args.real:
            return real(n, Path(tmp), args.threads or None)
        if args.served:
            return served(n, Path(tmp), args.service_ms, args.slots, args.tokens, args.threads or None)
        out = Path(tmp)
        pipe = Play(STAGES, n)
        summary = breakdown(out, pipe)
        slow = min(STAGES, key=lambda s: s.workers / s.options["delay_ms"])
        solo = Play([slow], n)
    print(f"pipeline of {len(STAGES)} stages: {summary['throughput']:.1f} samples/s over {n} samples; slowest stage "
          f"({slow.name}) alone: {solo.rate:.1f} samples/s; ratio {summary['throughput'] / solo.rate:.3f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
