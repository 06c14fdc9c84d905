"""Harness overhead on a generative model: the bare ``transformers`` engine vs ``mlharness run``, in one invocation.

The bare engine is the ``transformers`` predictor's own generation loop
(:meth:`~mlharness.predictors.transformers.TransformersPredictor.generate_ids`: the same model, generation
settings, batch size and threads) called directly on the same prompts, without LoadGen, queue or streams, on a
thread of its own as the predictor's engine thread is.

- Offline: tokens/s of the bare engine on batches of the manifest's Offline batch size, then of an Offline
  ``mlharness run`` (LoadGen's ``Tokens per second``); the ratio mlharness / bare.
- Server at a light load (one prompt at a time most of the time): the p50 time to first token and time per output
  token of the bare engine generating one prompt at a time, started at the pace of the Server run, then of a
  Server ``mlharness run`` at a fraction (``server_load``) of the rate one-at-a-time generation sustains; the
  differences are what the harness adds.

Bare and harness runs alternate round by round, so a machine that speeds up or slows down during the benchmark
affects both sides alike; medians over the rounds are reported. Both sides generate from the same prompts, each
cut to the length of the shortest (CNN/DailyMail prompts of a few hundred tokens differ twofold in prefill time, so
the p50 time to first token of a few dozen prompts drawn at random by LoadGen would otherwise measure which
prompts were drawn rather than the harness).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import ManifestError
from mlharness.fileguard import read_json
from mlharness.loadgen import settings as lgs
from mlharness.measurement.direct import DirectModel
from mlharness.run.runner import RunOptions, RunResult, run

TTFT_P50 = "50.00 percentile first token latency (ns)"
TPOT_P50 = "50.00 percentile time to output token (ns)"


@dataclass
class GenBenchConfig:
    manifest: str = "llama3.1-8b-random"
    dataset_path: str | None = None
    count: int = 32  # prompts loaded (the bare engine and the runs use the same ones)
    rounds: int = 3
    seconds: float = 5.0  # duration of each timed Offline run (bare and harness)
    server_queries: int = 32  # queries of each light-load Server run (and prompts timed one at a time, bare)
    server_load: float = 0.2  # Server rate, as a fraction of what one-at-a-time generation sustains
    threads: int | None = None
    progress: Callable[[str], None] | None = None

    def say(self, text: str) -> None:
        if self.progress:
            self.progress(text)


def new_token_counts(out: Any, width: int, eos: set[int], min_new: int) -> list[int]:
    """Tokens each row of ``model.generate``'s output generated, counted as the predictor's streamer counts them:
    up to and including the first EOS at or after ``min_new`` tokens (the rest is padding)."""
    counts = []
    for row in np.asarray(out.cpu() if hasattr(out, "cpu") else out)[:, width:]:
        n = len(row)
        for i, token in enumerate(row.tolist()):
            if i + 1 >= min_new and int(token) in eos:
                n = i + 1
                break
        counts.append(n)
    return counts


class _FirstTokenClock:
    """A streamer for one prompt: the time of its first new token and of its last."""

    def __init__(self) -> None:
        self.prompt_seen = False
        self.first: float | None = None
        self.last = 0.0

    def put(self, _value: Any) -> None:
        if not self.prompt_seen:  # generate() hands over the prompt first
            self.prompt_seen = True
            return
        self.last = time.perf_counter()
        if self.first is None:
            self.first = self.last

    def end(self) -> None:
        pass


def on_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a new thread, as the predictor's engine thread runs generation: torch's intra-op threads
    on a thread other than the main one are not those of the main thread, and timing the bare loop on the main
    thread would compare a different threading (on a busy 2-core machine, ten times slower)."""
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn(*args))
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            error.append(e)

    thread = threading.Thread(target=target, name="mlharness-bare-engine")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


class BareEngine:
    """The transformers predictor's generation loop, called directly on pre-loaded prompts."""

    def __init__(self, session: DirectModel, n: int, prompt_len: int | None = None):
        predictor = session.predictor
        if getattr(predictor, "name", None) != "transformers":
            raise ManifestError(f"bench generate needs a manifest whose framework is transformers; "
                                f"{session.ref} runs {getattr(predictor, 'name', type(predictor).__name__)}")
        self.predictor = predictor
        prompts = [np.ravel(session.batch(np.asarray([i], dtype=np.int64))[0][0]) for i in range(n)]
        self.prompts = [p[:prompt_len] if prompt_len else p for p in prompts]
        self.eos, self.min_new = predictor.eos, predictor.generation.min_new_tokens

    def _generate(self, prompts: list[np.ndarray], streamer: Any = None) -> list[int]:
        out = self.predictor.generate_ids(prompts, streamer)
        return new_token_counts(out, max(len(np.ravel(p)) for p in prompts), self.eos, self.min_new)

    def offline(self, batch: int, seconds: float) -> dict[str, float]:
        """Tokens/s and samples/s over contiguous batches of ``batch`` prompts, for ``seconds`` (whole passes)."""
        batches = [self.prompts[s:s + batch] for s in range(0, len(self.prompts), batch)]
        self._generate(batches[0])  # untimed warm-up
        tokens = samples = 0
        start = time.perf_counter()
        while samples == 0 or time.perf_counter() - start < seconds:
            for b in batches:
                tokens += sum(self._generate(b))
                samples += len(b)
        elapsed = time.perf_counter() - start
        return {"tokens_per_s": tokens / elapsed, "samples_per_s": samples / elapsed}

    def one_at_a_time(self, count: int, qps: float | None = None) -> dict[str, float]:
        """p50 time to first token, time per output token and whole generation (ms) of ``count`` prompts, each
        generated alone: back to back, or started ``1 / qps`` apart (the pace of the Server run it is compared
        with: an engine idle between requests starts each one from colder caches than one kept busy)."""
        self._generate(self.prompts[:1])  # untimed warm-up
        ttft, tpot, e2e = [], [], []
        t0 = time.perf_counter()
        for i in range(count):
            if qps:
                time.sleep(max(0.0, t0 + i / qps - time.perf_counter()))
            clock = _FirstTokenClock()
            start = time.perf_counter()
            n = self._generate([self.prompts[i % len(self.prompts)]], clock)[0]
            end = time.perf_counter()
            first = clock.first if clock.first is not None else end
            ttft.append(first - start)
            e2e.append(end - start)
            if n > 1:
                tpot.append((end - first) / (n - 1))
        return {"ttft_p50_ms": 1e3 * statistics.median(ttft), "tpot_p50_ms": 1e3 * statistics.median(tpot or [0.0]),
                "e2e_p50_ms": 1e3 * statistics.median(e2e)}


def equal_length_dataset(folder: str | None, n: int, dest: Path) -> tuple[str | None, int | None]:
    """A copy of a CNN/DailyMail folder whose first ``n`` prompts (``tok_input``) are cut to the shortest one's
    length, and that length; the folder unchanged (and None) for other datasets."""
    src = Path(folder) if folder else None
    if src is None or not (src / "cnn_eval.json").is_file():
        return folder, None
    records = read_json(src / "cnn_eval.json", "CNN/DailyMail dataset", error=ManifestError)[:n]
    length = min(len(r["tok_input"]) for r in records)
    dest.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.name != "cnn_eval.json" and not (dest / item.name).exists():
            (dest / item.name).symlink_to(item.resolve(), target_is_directory=item.is_dir())
    for r in records:
        r["tok_input"] = r["tok_input"][:length]
    (dest / "cnn_eval.json").write_text(json.dumps(records))
    return str(dest), length


def _run(cfg: GenBenchConfig, scenario: str, out: Path, dataset_path: str | None, n: int,
         **overrides: Any) -> RunResult:
    return run(RunOptions(scenario=scenario, mode="performance", manifest=cfg.manifest, dataset_path=dataset_path,
                          output=out, count=n, threads=cfg.threads, overrides=lgs.Overrides(**overrides)))


def _field(res: RunResult, name: str) -> float:
    value = res.summary.fields.get(name)
    if value is None:
        raise ManifestError(f"the {res.summary.fields.get('Scenario', '')} summary in {res.output} has no "
                            f"'{name}' line: is {res.output.name} a token-stream run?")
    return float(value)


def bench_generate(cfg: GenBenchConfig) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="mlharness-bench-generate-"))
    figures: dict[str, Any] = {"manifest": cfg.manifest, "rounds": cfg.rounds, "seconds": cfg.seconds,
                               "server_queries": cfg.server_queries, "server_load": cfg.server_load}
    cfg.say(f"loading {cfg.manifest}")
    session = DirectModel(cfg.manifest, cfg.dataset_path, cfg.count, threads=cfg.threads)
    try:
        n = session.load(cfg.count)
        dataset_path, prompt_len = equal_length_dataset(session.ctx.get("dataset_path"), n, work / "prompts")
        batch = session.loaded.model.batching.for_scenario("Offline")
        bare = BareEngine(session, n, prompt_len)
        g = session.predictor.generation
        figures.update(count=n, offline_batch=batch, max_new_tokens=g.max_new_tokens, threads=cfg.threads,
                       prompt_tokens=prompt_len)
        rows: dict[str, list[float]] = {k: [] for k in (
            "offline_bare_tps", "offline_harness_tps", "bare_ttft", "bare_tpot", "bare_e2e", "server_qps",
            "harness_ttft", "harness_tpot", "server_harness_tps")}
        for r in range(cfg.rounds):
            cfg.say(f"round {r + 1}/{cfg.rounds}: Offline bare (batch {batch}) / mlharness")
            b = on_thread(bare.offline, batch, cfg.seconds)
            rows["offline_bare_tps"].append(b["tokens_per_s"])
            # as many samples as the bare engine generates in ``seconds`` (LoadGen adds 10%), whole batches
            res = _run(cfg, "Offline", work / f"off_{r}", dataset_path, n, min_duration_ms=int(cfg.seconds * 1000),
                       target_qps=b["samples_per_s"], min_query_count=batch)
            rows["offline_harness_tps"].append(_field(res, "Tokens per second"))

            cfg.say(f"round {r + 1}/{cfg.rounds}: one prompt at a time bare / mlharness Server at a light load")
            one = on_thread(bare.one_at_a_time, cfg.server_queries)
            rows["bare_e2e"].append(one["e2e_p50_ms"])
            qps = cfg.server_load * 1e3 / max(one["e2e_p50_ms"], 1e-3)
            rows["server_qps"].append(qps)
            paced = on_thread(bare.one_at_a_time, cfg.server_queries, qps)  # at the Server run's pace
            rows["bare_ttft"].append(paced["ttft_p50_ms"])
            rows["bare_tpot"].append(paced["tpot_p50_ms"])
            res = _run(cfg, "Server", work / f"server_{r}", dataset_path, n, target_qps=qps,
                       min_query_count=cfg.server_queries, max_query_count=cfg.server_queries,
                       min_duration_ms=int(1000 * cfg.server_queries / qps * 0.5))
            rows["harness_ttft"].append(_field(res, TTFT_P50) / 1e6)
            rows["harness_tpot"].append(_field(res, TPOT_P50) / 1e6)
            rows["server_harness_tps"].append(_field(res, "Completed tokens per second"))
    finally:
        session.close()
        shutil.rmtree(work / "prompts", ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    figures.update(
        offline_bare_tokens_per_s=med["offline_bare_tps"],
        offline_harness_tokens_per_s=med["offline_harness_tps"],
        offline_ratio=med["offline_harness_tps"] / med["offline_bare_tps"],
        server_qps=med["server_qps"],
        bare_e2e_p50_ms=med["bare_e2e"],
        bare_ttft_p50_ms=med["bare_ttft"],
        harness_ttft_p50_ms=med["harness_ttft"],
        ttft_p50_added_ms=med["harness_ttft"] - med["bare_ttft"],
        bare_tpot_p50_ms=med["bare_tpot"],
        harness_tpot_p50_ms=med["harness_tpot"],
        tpot_p50_added_ms=med["harness_tpot"] - med["bare_tpot"],
        server_harness_tokens_per_s=med["server_harness_tps"],
        per_round={k: v for k, v in rows.items()},
    )
    return figures


def format_generate_figures(f: dict[str, Any]) -> str:
    m = f["manifest"]
    rows = [
        (f"{m} Offline bare engine (batch {f['offline_batch']})", f"{f['offline_bare_tokens_per_s']:,.1f} tokens/s"),
        (f"{m} Offline mlharness", f"{f['offline_harness_tokens_per_s']:,.1f} tokens/s"),
        ("  ratio mlharness / bare", f"{f['offline_ratio']:.3f}  (goal >= 0.95)"),
        (f"bare engine, one prompt at a time at {f['server_qps']:.2f}/s: TTFT p50", f"{f['bare_ttft_p50_ms']:.2f} ms"),
        (f"mlharness Server at {f['server_qps']:.2f} QPS ({f['server_load']:.0%} load): TTFT p50",
         f"{f['harness_ttft_p50_ms']:.2f} ms"),
        ("  TTFT p50 added by the harness", f"{f['ttft_p50_added_ms']:+.2f} ms  (goal <= 2)"),
        ("bare engine, one prompt at a time: TPOT p50", f"{f['bare_tpot_p50_ms']:.3f} ms"),
        ("mlharness Server: TPOT p50", f"{f['harness_tpot_p50_ms']:.3f} ms"),
        ("  TPOT p50 added by the harness", f"{f['tpot_p50_added_ms']:+.3f} ms"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def run_cli(args: Any, show: Callable[[str], None], progress: Callable[[str], None]) -> int:
    """``mlharness bench generate``: ``--quick`` is one round of short runs."""
    import json

    cfg = GenBenchConfig(manifest=args.manifest, dataset_path=args.dataset_path, count=args.count,
                         rounds=1 if args.quick else args.rounds,
                         seconds=min(args.seconds, 2.0) if args.quick else args.seconds,
                         server_queries=min(args.server_queries, 8) if args.quick else args.server_queries,
                         threads=args.threads, progress=progress)
    figures = bench_generate(cfg)
    show(json.dumps(figures, default=float) if args.json else format_generate_figures(figures))
    return 0


__all__ = ["BareEngine", "GenBenchConfig", "bench_generate", "format_generate_figures", "new_token_counts",
           "on_thread", "run_cli"]
