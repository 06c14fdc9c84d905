"""``mlharness cluster nodes [--cluster auto|ray://HOST:PORT|local] [--json]``: the registry of machines that can
run work, each with its resources, labels and host facts measured on it (what ``mlharness sysinfo`` measures).

Kept light: Ray is imported inside the handler, and only when a cluster is named."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mlharness.cluster.jobs import NodeInfo


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("cluster", help="the machines work can be spread over (a Ray cluster, or this one)")
    actions = group.add_subparsers(dest="action", required=True)
    p = actions.add_parser("nodes", help="each node with its resources, labels and host facts",
                           description="List each node of the cluster with what it offers (CPUs, memory, custom "
                           "resources such as accelerators), its labels and its host facts measured on the node "
                           "(CPU model, cores, memory, accelerators, framework versions): what constraints in a "
                           "campaign are matched against.")
    p.add_argument("--cluster", default="auto", metavar="auto|ray://HOST:PORT|local",
                   help="the Ray cluster ('auto', the default: the one RAY_ADDRESS names or `mlharness cluster "
                   "start` started, else this machine alone) or 'local' (this machine alone)")
    p.add_argument("--json", action="store_true", help="print the nodes as JSON")
    p.set_defaults(func=cmd_nodes)
    s = actions.add_parser("start", help="start a Ray head on this machine for mlharness (what --cluster auto "
                           "joins)", description="Start a Ray head here (`ray start --head` on a free port) and "
                           "record its address in mlharness's state folder ($XDG_STATE_HOME/mlharness, default "
                           "~/.local/state/mlharness): --cluster auto joins that cluster, or the one RAY_ADDRESS "
                           "names, and never another job's Ray head on the same host. Stop it with `ray stop`.")
    s.add_argument("--host", default="127.0.0.1", help="the address the head listens on (default 127.0.0.1; "
                   "give this machine's address for other machines to join it)")
    s.add_argument("--port", type=int, default=None, help="the GCS port (default: a free one)")
    s.add_argument("ray_args", nargs=argparse.REMAINDER, help="further `ray start` options, after --")
    s.set_defaults(func=cmd_start)


def node_dict(node: NodeInfo) -> dict[str, Any]:
    return {"node_id": node.node_id, "address": node.address, "alive": node.alive, "resources": node.resources,
            "labels": node.labels, "facts": node.facts}


def _gb(n: float | None) -> str:
    return f"{n / 1e9:.1f} GB" if n else "-"


def _accelerators(node: NodeInfo) -> str:
    """Custom resources (what constraints name as accelerators) and the devices NVML found."""
    custom = [f"{k}: {v:g}" for k, v in sorted(node.resources.items())
              if k not in ("CPU", "memory", "object_store_memory") and not k.startswith("node:")]
    devices = (node.facts.get("accelerators") or {}).get("devices") or []
    names = [d.get("name") or d.get("model") or "device" for d in devices if isinstance(d, dict)]
    return ", ".join(custom + names) or "-"


def cmd_nodes(args: argparse.Namespace, console: Any) -> int:
    from rich.markup import escape
    from rich.table import Table

    from mlharness.cluster.executor import make_executor

    executor = make_executor(args.cluster)
    try:
        nodes = executor.nodes()
    finally:
        executor.close()
    if args.json:
        print(json.dumps([node_dict(n) for n in nodes], indent=2, default=str))
        return 0
    table = Table(title=f"{len(nodes)} node(s)")
    for column in ("node", "address", "alive", "CPUs", "memory", "accelerators", "labels", "CPU model",
                   "frameworks"):
        table.add_column(column)
    for n in nodes:
        f = n.facts
        frameworks = ", ".join(f"{k} {v}" for k, v in (f.get("frameworks") or {}).items()) or f.get("error", "-")
        table.add_row(escape(n.node_id[:12]), escape(n.address), "yes" if n.alive else "[red]no[/]",
                      f"{n.resources.get('CPU', 0):g} of {f.get('cpu_count') or '?'}",
                      _gb(f.get("memory_bytes")), escape(_accelerators(n)),
                      escape(", ".join(f"{k}={v}" for k, v in sorted(n.labels.items())) or "-"),
                      escape(str(f.get("cpu_model", "-"))), escape(frameworks))
    console.print(table)
    return 0


def cmd_start(args: argparse.Namespace, console: Any) -> int:
    from rich.markup import escape

    from mlharness.cluster.head import record_path, start_head
    from mlharness.errors import SettingsError

    if args.port is not None and not 0 < args.port < 65536:
        raise SettingsError(f"cluster start --port {args.port}: give a TCP port (1-65535)")
    extra = [a for a in args.ray_args if a != "--"]
    record = start_head(args.host, args.port, extra)
    console.print(f"Ray head started at {escape(record['address'])}, recorded in {escape(str(record_path()))}: "
                  "--cluster auto joins it; other machines join with "
                  f"`ray start --address={escape(record['address'])}`", highlight=False, soft_wrap=True)
    return 0
