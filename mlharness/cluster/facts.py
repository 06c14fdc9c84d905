"""What a node is, measured on it, and whether it meets a job's constraints.

A node's facts are what ``mlharness sysinfo`` measures (``mlharness/telemetry/sysinfo.py``), taken on the node
itself: the local executor calls :func:`node_facts` here, the Ray executor in a task pinned to each node. Matching
reads only these facts and the node's resources and labels, so a constraint the facts cannot answer (a framework
the node does not have) never matches rather than being guessed.
"""

from __future__ import annotations

from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from mlharness.cluster.jobs import Constraints, NodeInfo
from mlharness.telemetry import sysinfo


def node_facts() -> dict[str, Any]:
    """This host's facts: the cheap summary every run records, the CPU and accelerators as ``sysinfo`` describes
    them, and the installed framework and stack versions (what framework constraints are checked against)."""
    facts = sysinfo.host_facts()
    memory = facts.get("memory_bytes")
    facts["memory_gb"] = round(memory / 1e9, 1) if memory else None
    facts["cpu"] = sysinfo.cpu_info()
    facts["accelerators"] = sysinfo.accelerator_info()
    facts["frameworks"] = sysinfo.package_versions(sysinfo.FRAMEWORK_PACKAGES)
    facts["software"] = sysinfo.package_versions(sysinfo.STACK_PACKAGES)
    return facts


def installed_version(facts: dict[str, Any], name: str) -> str | None:
    for group in ("frameworks", "software"):
        version = (facts.get(group) or {}).get(name)
        if version:
            return version
    return None


def mismatch(node: NodeInfo, c: Constraints) -> str | None:
    """Why ``node`` cannot run a job with constraints ``c`` (None: it can). The reasons name what is missing, so
    a job no node can run is reported with each node's reason instead of waiting forever in a queue."""
    if not node.alive:
        return "the node is not alive"
    if c.node and not node.node_id.startswith(c.node):
        return f"the job is pinned to node {c.node[:12]}"
    have = node.resources.get("CPU", 0.0)
    if c.cpus > have:
        return f"{c.cpus:g} CPUs asked, the node has {have:g}"
    if c.accelerator:
        have = node.resources.get(c.accelerator, 0.0)
        if have < c.accelerators:
            return f"{c.accelerators:g} × {c.accelerator} asked, the node has {have:g}"
    if c.min_memory_gb:
        memory = node.facts.get("memory_gb")
        if memory is None:
            return "the node's memory is unknown"
        if memory < c.min_memory_gb:
            return f"≥ {c.min_memory_gb:g} GB memory asked, the node has {memory:g} GB"
    for name, spec in c.frameworks:
        version = installed_version(node.facts, name)
        if version is None:
            return f"{name} is not installed on the node"
        try:
            ok = Version(version) in SpecifierSet(spec)
        except (InvalidSpecifier, InvalidVersion) as e:
            return f"{name}{spec}: {e}"
        if not ok:
            return f"{name}{spec} asked, the node has {name} {version}"
    for key, value in c.labels:
        if node.labels.get(key) != value:
            return f"label {key}={value} asked, the node has {key}={node.labels.get(key, '(none)')}"
    return None


def matching(nodes: list[NodeInfo], c: Constraints) -> list[NodeInfo]:
    return [n for n in nodes if mismatch(n, c) is None]


def no_node_error(nodes: list[NodeInfo], c: Constraints) -> str:
    """The error of a job no node can run: each node with its reason."""
    reasons = "; ".join(f"{n.short()}: {mismatch(n, c)}" for n in nodes) or "the cluster has no nodes"
    return f"no node meets the job's constraints ({c.describe()}): {reasons}"
