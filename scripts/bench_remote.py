"""What running the model on an agent over loopback costs, against running it in the harness process.

    .venv/bin/python scripts/bench_remote.py [--manifest demo|resnet50-random] [--seconds 5] [--rounds 3] [--json]

Starts one agent (`mlharness agent serve --port 0`) on 127.0.0.1 and alternates local and remote runs (so a
machine that speeds up or slows down affects both alike; medians are reported):

- Offline throughput: remote (``--agent``) over local samples/s; goal >= 0.9;
- SingleStream: the remote p50 latency minus the local p50 (what one round trip adds); goal <= 1 ms.

Both processes share this machine's cores, so on a small machine the ratio also measures the harness and the
agent competing for CPU. Without --dataset-path, resnet50* manifests get a synthetic ImageNet in the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mlharness.loadgen import settings as lgs
from mlharness.run.runner import RunOptions, run

P50 = "50.00 percentile latency (ns)"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _drain(stream: Any) -> None:
    for _ in stream:  # keep reading the agent's output so it never blocks on a full pipe
        pass


def start_agent(args: argparse.Namespace, dataset_path: str | None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "mlharness.cli", "agent", "serve", "--manifest", args.manifest, "--port", "0",
           "--workers", str(args.agent_workers)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:  # type: ignore[union-attr]
        lines.append(line)
        m = re.search(r"listening on (\S+):(\d+)", line)
        if m:
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return proc, f"127.0.0.1:{m.group(2)}"
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("the agent did not start:\n" + "".join(lines))


def one_run(args: argparse.Namespace, scenario: str, out: Path, dataset_path: str | None, agents: list[str],
            workers: int, **overrides: Any) -> Any:
    return run(RunOptions(scenario=scenario, mode="performance", manifest=args.manifest, dataset_path=dataset_path,
                          output=out, count=args.count, threads=args.threads, workers=workers, agents=agents,
                          overrides=lgs.Overrides(**overrides)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--manifest", default="demo")
    p.add_argument("--dataset-path", default=None)
    p.add_argument("--count", type=int, default=256)
    p.add_argument("--seconds", type=float, default=5.0, help="min duration of each run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="framework intra-op threads (both sides)")
    p.add_argument("--remote-workers", type=int, default=2, help="SUT workers of the remote runs (requests in "
                   "flight); local runs use 1")
    p.add_argument("--agent-workers", type=int, default=1, help="batches the agent runs at once")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    from mlharness.measurement.bench import default_dataset

    dataset_path = default_dataset(args.manifest, args.dataset_path, args.count)

    work = Path(tempfile.mkdtemp(prefix="mlharness-bench-remote-"))
    ms = int(args.seconds * 1000)
    say("calibrating locally")
    qps = 50.0  # a small first guess, then the rate it measured: an Offline query is qps x duration samples
    for step in range(2):
        cal = one_run(args, "Offline", work / f"cal_{step}", dataset_path, [], 1, min_duration_ms=1000,
                      target_qps=qps, min_query_count=1)
        qps = max(1.0, float(cal.summary.metric_value or 1.0))
    cal_ss = one_run(args, "SingleStream", work / "cal_ss", dataset_path, [], 1, min_duration_ms=1000,
                     target_latency_ms=0.01, min_query_count=32)
    lat_ms = float(cal_ss.summary.fields[P50]) / 1e6

    agent, address = start_agent(args, dataset_path)
    fig: dict[str, list[float]] = {k: [] for k in ("local_sps", "remote_sps", "local_p50_us", "remote_p50_us")}
    try:
        for r in range(args.rounds):
            say(f"round {r + 1}/{args.rounds}")
            for side, agents, workers in (("local", [], 1), ("remote", [address], args.remote_workers)):
                res = one_run(args, "Offline", work / f"{side}_off_{r}", dataset_path, agents, workers,
                              min_duration_ms=ms, target_qps=qps, min_query_count=1)
                fig[f"{side}_sps"].append(float(res.summary.metric_value or 0))
                res = one_run(args, "SingleStream", work / f"{side}_ss_{r}", dataset_path, agents, 1,
                              min_duration_ms=ms, target_latency_ms=lat_ms, min_query_count=32)
                fig[f"{side}_p50_us"].append(float(res.summary.fields[P50]) / 1e3)
    finally:
        agent.terminate()
        agent.wait(30)
    med = {k: statistics.median(v) for k, v in fig.items()}
    result = {
        "manifest": args.manifest, "rounds": args.rounds, "seconds": args.seconds, "cpus": os.cpu_count(),
        "remote_workers": args.remote_workers, "agent_workers": args.agent_workers,
        "offline_local_sps": med["local_sps"], "offline_remote_sps": med["remote_sps"],
        "offline_ratio": med["remote_sps"] / med["local_sps"],
        "singlestream_local_p50_us": med["local_p50_us"], "singlestream_remote_p50_us": med["remote_p50_us"],
        "singlestream_added_p50_us": med["remote_p50_us"] - med["local_p50_us"],
        "rounds_raw": fig,
    }
    result["goals"] = {"offline_ratio>=0.9": result["offline_ratio"] >= 0.9,
                       "added_p50<=1ms": result["singlestream_added_p50_us"] <= 1000}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.manifest}: Offline local {result['offline_local_sps']:,.1f} samples/s, remote "
              f"{result['offline_remote_sps']:,.1f} samples/s, ratio {result['offline_ratio']:.3f} (goal >= 0.9)")
        print(f"SingleStream p50 local {result['singlestream_local_p50_us']:,.1f} us, remote "
              f"{result['singlestream_remote_p50_us']:,.1f} us, added {result['singlestream_added_p50_us']:,.1f} us "
              f"(goal <= 1000 us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
