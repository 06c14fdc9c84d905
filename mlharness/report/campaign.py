"""A campaign's results side by side: one row per system (per node for a system run ``on: each``) with the host
facts of the machine that ran it, one column per model / scenario / mode with its figure.

The rows come from ``campaign.json`` (written by ``mlharness campaign run``: each job's system, node and folder)
and the run folders themselves; the CPU is the one the run's own metadata measured on its node, the accelerator
the node's resources as the cluster announced them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.report.collect import Run
from mlharness.report.treefiles import read_optional_json

RECORD = "campaign.json"
# Ray's own resources, not accelerators
_PLAIN = ("CPU", "memory", "object_store_memory")


def read_campaign(root: Path) -> dict[str, Any] | None:
    data = read_optional_json(root / RECORD, "campaign record")
    return data if isinstance(data, dict) and isinstance(data.get("jobs"), list) else None


def accelerator_of(node: dict[str, Any] | None) -> str:
    """The node's accelerators: what its host facts name, else its resources beyond CPU and memory."""
    if not node:
        return "-"
    acc = (node.get("facts") or {}).get("accelerators") or {}  # sysinfo's accelerator_info, measured on the node
    devices = acc.get("devices") if isinstance(acc, dict) else None
    if devices:
        names = [str(d.get("name", "?")) for d in devices if isinstance(d, dict)]
        return ", ".join(f"{n} × {names.count(n)}" for n in dict.fromkeys(names))
    custom = {k: v for k, v in (node.get("resources") or {}).items()
              if k not in _PLAIN and not k.startswith(("node:", "accelerator_type:"))}
    return ", ".join(f"{k} × {v:g}" if isinstance(v, int | float) else k for k, v in sorted(custom.items())) or "none"


def figure(run: Run | None) -> str:
    """A run's headline: VALID/INVALID and the metric (performance), or its accuracy line."""
    if run is None:
        return "-"
    if run.mode == "accuracy":
        text = (run.accuracy_text or "").splitlines()
        return text[0] if text else "accuracy: -"
    value = f"{run.metric_text} {run.metric_unit}".strip() if run.metric_text else "-"
    return f"{run.result or '?'}, {value}"


def side_by_side(root: Path, runs: list[Run]) -> tuple[list[str], list[list[str]]] | None:
    """(columns, rows) of a campaign's systems, or None when ``root`` holds no campaign record."""
    data = read_campaign(root)
    if data is None:
        return None
    by_rel = {r.rel: r for r in runs}
    rows: dict[str, dict[str, Any]] = {}
    columns: list[str] = []
    for job in data["jobs"]:
        dest = str(job.get("dest", ""))
        system_label, _, rest = dest.partition("/")
        if not rest:
            continue
        if rest not in columns:
            columns.append(rest)
        row = rows.setdefault(system_label, {"node": None, "cpu": None, "cells": {}})
        run = by_rel.get(dest)
        row["cells"][rest] = figure(run) if run else str(job.get("outcome", "-"))
        row["node"] = row["node"] or job.get("node")
        host = ((run.meta or {}).get("host") if run else None) or {}
        if host.get("cpu_model") and not row["cpu"]:
            row["cpu"] = f"{host['cpu_model']} ({host.get('cpu_count', '?')} cores)"
    header = ["system", "node", "CPU", "accelerator", *columns]
    out = []
    for label, row in rows.items():
        node = row["node"] or {}
        where = f"{str(node.get('node_id', '-'))[:12]} ({node.get('address', '?')})" if node else "-"
        out.append([label, where, row["cpu"] or "-", accelerator_of(node),
                    *(row["cells"].get(c, "-") for c in columns)])
    return header, out
