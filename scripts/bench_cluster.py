"""A campaign of 6 runs of a fixed-capacity toy model on a 3-node local Ray cluster against the same 6 runs one
after another on the local executor: the wall time of each, the speed-up, and the dispatch cost per run.

The model is the echo toy with a sleep per batch of one sample, so its capacity (about 100 samples/s) does not
depend on how busy the host is; each run is an Offline performance run of ``--seconds``. The dispatch cost per run
is the node time not spent inside the runs' own processes: (wall time × nodes − Σ run durations) / runs, with one
node for the local executor. The runs' own durations are those the local executor measured around each run's
process (the same runs of a fixed-capacity model take the same time on every node; a Ray outcome's times include
its wait in Ray's queue). Not a test: it takes about a minute. ``python scripts/bench_cluster.py``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

TOY = """\
name: {name}
framework: {{name: echo, options: {{sleep_ms: 10}}}}
inputs: [{{name: x, element_type: float32, shape: [4]}}]
outputs: [{{name: y, element_type: float32}}]
batching: {{max_batchsize: 1}}
dataset:
  name: toy_data
  init: |
    def init(count):
        return count or 64
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      return np.full(4, index, np.float32)
postprocess: |
  def postprocess(ctx, outputs):
      return outputs[0]
"""


def write_campaign(folder: Path, runs: int, seconds: float) -> Path:
    names = [f"toy{i}" for i in range(runs)]
    for name in names:
        (folder / f"{name}.yaml").write_text(TOY.format(name=name))
    path = folder / "campaign.yaml"
    path.write_text(f"models: [{', '.join(n + '.yaml' for n in names)}]\nscenarios: [Offline]\nmodes: [performance]\n"
                    f"options: {{min_duration_ms: {int(seconds * 1000)}, min_query_count: 1, count: 64, "
                    f"target_qps: 100, no_calibrate: true}}\nsystems: [{{name: toy}}]\n")
    return path


def campaign(path: Path, executor, root: Path) -> tuple[float, list]:
    from mlharness.cluster.campaign import expand, run_campaign
    from mlharness.cluster.campaign_file import load_campaign

    plan = expand(load_campaign(path), executor, path.parent, path)
    started = time.perf_counter()
    outcomes = run_campaign(plan, executor, root, path, resume=False)
    wall = time.perf_counter() - started
    failed = [o for o in outcomes if not o.ok]
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed: {failed[0].error}")
    return wall, outcomes


def own_seconds(outcomes: list) -> float:
    return sum((o.finished_unix or 0) - (o.started_unix or 0) for o in outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="each run's LoadGen duration")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep the driver on the loopback
    import ray
    from ray.cluster_utils import Cluster

    from mlharness.cluster.local import LocalExecutor
    from mlharness.cluster.ray_executor import RayExecutor

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        folder = Path(tmp)
        path = write_campaign(folder, args.runs, args.seconds)
        local = LocalExecutor()
        seq_wall, seq = campaign(path, local, folder / "sequential")
        local.close()

        common = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
        cluster = Cluster(initialize_head=True, head_node_args={**common, "num_cpus": 1})
        for _ in range(args.nodes - 1):
            cluster.add_node(num_cpus=1, **common)
        cluster.wait_for_nodes(timeout=60)
        try:
            t0 = time.perf_counter()
            rex = RayExecutor(cluster.address)
            nodes = rex.nodes()  # the facts of every node, measured once, as a campaign does before it starts
            connect = time.perf_counter() - t0
            ray_wall, par = campaign(path, rex, folder / "ray")
            rex.close()
        finally:
            ray.shutdown()
            cluster.shutdown()

    used = {o.node.node_id for o in par if o.node}
    seq_cost = (seq_wall - own_seconds(seq)) / len(seq)
    ray_cost = (ray_wall * len(nodes) - own_seconds(seq)) / len(par)
    print(f"{args.runs} Offline performance runs of {args.seconds:g} s, a fixed-capacity toy (echo, 10 ms per sample)")
    print(f"sequential, local executor:   wall {seq_wall:6.1f} s   runs' own time {own_seconds(seq):6.1f} s   "
          f"dispatch per run {seq_cost:.2f} s")
    print(f"ray, {len(nodes)} nodes ({len(used)} used):     wall {ray_wall:6.1f} s   "
          f"dispatch per run {ray_cost:.2f} s (node time outside the runs)")
    print(f"connecting and reading the nodes' facts: {connect:.1f} s (once per campaign, not counted above)")
    print(f"speed-up: {seq_wall / ray_wall:.2f}x (goal >= 2.5x); dispatch per run {ray_cost:.2f} s (goal < 1 s)")


if __name__ == "__main__":
    main()
