"""The shapes every executor shares: what a run job asks of its node, what a node is, how a run ended.

A job is an ``mlharness`` command line (without ``--output``: the executor gives each run its own output folder on
the node) plus the constraints of the node it must run on. The executor returns the run folder into the driver's
results tree at ``dest`` (relative to the tree's root) and reports a :class:`RunOutcome` naming the node that ran it.
Nothing assumes a file system shared between the driver and the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Constraints:
    """What a node must have to run a job. Every field is optional; an empty Constraints matches every node."""

    accelerator: str | None = None  # a resource name the node offers (Ray custom resource / label), e.g. "GPU"
    accelerators: float = 1.0  # how many of ``accelerator`` the run holds while it runs
    min_memory_gb: float | None = None  # the node's total memory, as its host facts measure it
    frameworks: tuple[tuple[str, str], ...] = ()  # (distribution name, PEP 440 specifier), e.g. ("onnxruntime", ">=1.20")
    labels: tuple[tuple[str, str], ...] = ()  # node labels that must match exactly
    cpus: float = 1.0  # CPUs the run holds while it runs
    node: str | None = None  # a node id: set when a campaign asks for "each matching node"

    def describe(self) -> str:
        parts = []
        if self.accelerator:
            parts.append(f"{self.accelerators:g} × {self.accelerator}")
        if self.min_memory_gb:
            parts.append(f"≥ {self.min_memory_gb:g} GB memory")
        parts += [f"{name}{spec}" for name, spec in self.frameworks]
        parts += [f"label {k}={v}" for k, v in self.labels]
        if self.node:
            parts.append(f"node {self.node}")
        return ", ".join(parts) or "any node"


@dataclass(frozen=True)
class RunJob:
    key: str  # stable and unique within the work: a resumed campaign skips the keys already done
    argv: tuple[str, ...]  # the mlharness command line, e.g. ("run", "--manifest", "resnet50-oracle", ...)
    dest: str  # where the run folder lands, relative to the driver's results root (a '/'-separated path)
    constraints: Constraints = Constraints()
    env: tuple[tuple[str, str], ...] = ()  # extra environment of the run's process
    timeout_s: float | None = None  # wall-clock bound of the run's process; None: no bound
    # files the run needs that its node may lack (a user's manifest, a user.conf, an audit config): (path relative
    # to the run's working folder on the node, content), written there before the run starts; argv names them by
    # those relative paths. Built-in manifests are named, not shipped.
    files: tuple[tuple[str, bytes], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False)  # campaign fields (model, scenario, system)
    # False: the run's process starts only when no other such run holds its host (mlharness/cluster/hostlock.py);
    # True (--share-host): at once, sharing the host with whatever else runs there
    share_host: bool = False


@dataclass
class NodeInfo:
    node_id: str
    address: str  # the node's IP (or "localhost")
    resources: dict[str, float] = field(default_factory=dict)  # what the node offers (CPU, memory, custom)
    labels: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # host facts as `mlharness sysinfo` measures them, on it
    alive: bool = True

    def short(self) -> str:
        return f"{self.node_id[:12]} ({self.address})"


@dataclass
class RunOutcome:
    job: RunJob
    ok: bool
    rc: int | None  # the run process's exit code (None: it never ran or the node died under it)
    node: NodeInfo | None  # the node that ran the last attempt
    folder: Path | None  # the run folder in the driver's tree (a '.failed-*' folder when the run failed)
    error: str | None = None  # why it failed, naming the node
    attempts: int = 1
    started_unix: float | None = None
    finished_unix: float | None = None
    skipped: bool = False  # --resume found it done and did not run it again
    cancelled: bool = False  # the driver stopped it (cancel(): SIGINT/SIGTERM), or it never started for that
    lost: bool = False  # the cluster's head stopped answering before the run came back: not finished, its
    # outcome unknown (a campaign records it `lost`; --resume runs it again)


def parse_constraints(text: str | None) -> Constraints:
    """``--constraints accelerator=GPU,accelerators=2,min_memory_gb=32,cpus=1,label.zone=a,framework.onnxruntime=>=1.20``
    (a framework's specifier may not hold a comma: give it once per bound). Every command that places runs on a
    cluster (``submission run``, ``sweep``) reads the flag with this."""
    from mlharness.errors import SettingsError

    if not text:
        return Constraints()
    fields: dict[str, Any] = {"frameworks": [], "labels": []}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not value:
            raise SettingsError(f"--constraints: {part!r} is not KEY=VALUE")
        if key.startswith("label."):
            fields["labels"].append((key[6:], value))
        elif key.startswith("framework."):
            fields["frameworks"].append((key[10:], value))
        elif key in ("accelerator", "node"):
            fields[key] = value
        elif key in ("accelerators", "min_memory_gb", "cpus"):
            try:
                fields[key] = float(value)
            except ValueError:
                raise SettingsError(f"--constraints: {key} takes a number, not {value!r}") from None
        else:
            raise SettingsError(f"--constraints: unknown key {key!r}; expected accelerator, accelerators, "
                                f"min_memory_gb, cpus, node, label.NAME, framework.NAME")
    return Constraints(**{**fields, "frameworks": tuple(fields["frameworks"]), "labels": tuple(fields["labels"])})
