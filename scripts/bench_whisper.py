#!/usr/bin/env python3
"""Harness overhead on a speech-to-text model: the bare ``transformers-speech`` engine vs ``mlharness run``.

The bare engine is the predictor's own generation loop (``SpeechPredictor.generate_ids``: the same checkpoint,
feature extractor, generation settings, batch size and threads) called directly on the same clips, in this process,
without LoadGen, queue or token streams, on a thread of its own as the engine's. Bare and harness runs alternate round by round; medians are reported.

- Offline: samples/s (and tokens/s) of the bare engine on batches of the manifest's Offline batch size, then of an
  Offline ``mlharness run`` asked for about as many samples as the bare engine did in ``--seconds``; the ratio
  mlharness / bare.
- SingleStream: the p90 latency of one clip at a time, bare, then of a SingleStream ``mlharness run`` over the
  same number of queries; the difference is what the harness adds.

    .venv/bin/python scripts/bench_whisper.py [--manifest whisper-random] [--count 16] [--rounds 3] [--quick]

``--quick`` (4 clips, one round, a few queries) is a smoke test, not a measurement. ``--out DIR`` keeps the runs
and writes ``bench_whisper.json`` there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def new_tokens(out: Any, eos: set[int]) -> int:
    """Generated tokens of a batch: each row up to its first EOS (included)."""
    total = 0
    for row in np.asarray(out.cpu()):
        hits = [k for k, t in enumerate(row.tolist()) if t in eos]
        total += hits[0] + 1 if hits else len(row)
    return total


def bare_offline(predictor: Any, prompts: list[np.ndarray], batch: int, seconds: float) -> dict[str, float]:
    """Whole passes over the clips in batches of ``batch`` until ``seconds`` have passed (one pass at least)."""
    samples = tokens = 0
    start = time.perf_counter()
    while True:
        for k in range(0, len(prompts), batch):
            chunk = prompts[k:k + batch]
            tokens += new_tokens(predictor.generate_ids(chunk), predictor.eos)
            samples += len(chunk)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return {"samples_per_s": samples / elapsed, "tokens_per_s": tokens / elapsed}


def bare_single(predictor: Any, prompts: list[np.ndarray], queries: int) -> dict[str, float]:
    """One clip at a time, ``queries`` times over the clips: latency percentiles (ms)."""
    lat = []
    for q in range(queries):
        start = time.perf_counter()
        predictor.generate_ids([prompts[q % len(prompts)]])
        lat.append((time.perf_counter() - start) * 1e3)
    return {"p50_ms": float(np.percentile(lat, 50)), "p90_ms": float(np.percentile(lat, 90))}


def on_thread(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on a thread of its own, as the predictor's engine thread runs it (torch on this process's
    main thread can run many times slower than on another thread with the same intra-op threads)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name="bench-whisper-bare")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def harness(manifest: str, scenario: str, out: Path, count: int, threads: int | None, **overrides: Any) -> Any:
    from mlharness.loadgen import settings as lgs
    from mlharness.run.runner import RunOptions, run

    return run(RunOptions(scenario=scenario, mode="performance", manifest=manifest, output=out, count=count,
                          threads=threads, overrides=lgs.Overrides(**overrides))).summary.fields


def field(fields: dict[str, Any], *names: str) -> float:
    for name in names:
        if fields.get(name) is not None:
            return float(fields[name])
    raise SystemExit(f"the run's summary has none of {names}")


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from mlharness.measurement.direct import DirectModel

    work = args.out or Path(tempfile.mkdtemp(prefix="mlharness-bench-whisper-"))
    session = DirectModel(args.manifest, args.dataset_path, args.count, threads=args.threads)
    try:
        n = session.load(args.count)
        prompts = [session.store.gather(np.asarray([i], dtype=np.int64))[0][0] for i in range(n)]
        batch = session.loaded.model.batching.for_scenario("Offline")
        predictor = session.predictor
        on_thread(predictor.generate_ids, prompts[:1])  # warm-up, untimed
        rows: dict[str, list[float]] = {k: [] for k in (
            "bare_sps", "bare_tps", "harness_sps", "harness_tps", "bare_p90", "harness_p90")}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}: Offline bare (batch {batch}) / mlharness", flush=True)
            b = on_thread(bare_offline, predictor, prompts, batch, args.seconds)
            rows["bare_sps"].append(b["samples_per_s"])
            rows["bare_tps"].append(b["tokens_per_s"])
            fields = harness(args.manifest, "Offline", work / f"offline_{r}", n, args.threads,
                             min_duration_ms=int(args.seconds * 1000), target_qps=b["samples_per_s"],
                             min_query_count=min(batch, n))
            rows["harness_sps"].append(field(fields, "Samples per second"))
            rows["harness_tps"].append(field(fields, "Tokens per second"))

            print(f"round {r + 1}/{args.rounds}: SingleStream bare / mlharness ({args.queries} queries)", flush=True)
            s = on_thread(bare_single, predictor, prompts, args.queries)
            rows["bare_p90"].append(s["p90_ms"])
            fields = harness(args.manifest, "SingleStream", work / f"single_{r}", n, args.threads,
                             min_query_count=args.queries, max_query_count=args.queries, min_duration_ms=1,
                             target_latency_ms=s["p50_ms"])
            rows["harness_p90"].append(field(fields, "90.0th percentile latency (ns)",
                                             "90.00 percentile latency (ns)") / 1e6)
    finally:
        session.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {
        "manifest": args.manifest, "clips": n, "rounds": args.rounds, "offline_batch": batch,
        "offline": {"bare_samples_per_s": med["bare_sps"], "harness_samples_per_s": med["harness_sps"],
                    "ratio": med["harness_sps"] / med["bare_sps"], "bare_tokens_per_s": med["bare_tps"],
                    "harness_tokens_per_s": med["harness_tps"]},
        "singlestream": {"queries": args.queries, "bare_p90_ms": med["bare_p90"],
                         "harness_p90_ms": med["harness_p90"], "p90_added_ms": med["harness_p90"] - med["bare_p90"]},
        "per_round": rows, "output": str(work),
    }


def report(f: dict[str, Any]) -> str:
    o, s = f["offline"], f["singlestream"]
    return "\n".join([
        f"{f['manifest']}: {f['clips']} clips, {f['rounds']} round(s), Offline batch {f['offline_batch']}",
        f"Offline throughput ratio (mlharness / bare): {o['ratio']:.3f}  "
        f"({o['harness_samples_per_s']:.2f} vs {o['bare_samples_per_s']:.2f} samples/s; "
        f"{o['harness_tokens_per_s']:.1f} vs {o['bare_tokens_per_s']:.1f} tokens/s)",
        f"SingleStream p90 added by mlharness: {s['p90_added_ms']:+.2f} ms  "
        f"({s['harness_p90_ms']:.2f} vs {s['bare_p90_ms']:.2f} ms over {s['queries']} queries)",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", default="whisper-random")
    parser.add_argument("--dataset-path", default=None, help="default: the manifest's (the synthetic set)")
    parser.add_argument("--count", type=int, default=16, help="clips loaded (bare and harness use the same)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each timed Offline run")
    parser.add_argument("--queries", type=int, default=16, help="queries of each SingleStream run")
    parser.add_argument("--threads", type=int, default=None, help="framework threads (both sides)")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here and write bench_whisper.json")
    parser.add_argument("--quick", action="store_true", help="smoke test: 4 clips, one round, 4 queries")
    args = parser.parse_args()
    if args.quick:
        args.count, args.rounds, args.seconds, args.queries = 4, 1, 0.1, 4
    figures = bench(args)
    print(report(figures))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_whisper.json").write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
