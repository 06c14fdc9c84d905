"""A campaign: models × datasets × scenarios × modes × systems expanded into run jobs, run on an executor, each
run folder landing at ``<results>/<system>/<model>/<scenario>/<mode>`` and recorded in ``<results>/campaign.json``.

A system ``on: each`` becomes one node-pinned system per matching node (``<system>@<node>``), so the same
evaluation on every machine gives one result per machine, side by side in ``mlharness report``. The record is
rewritten as each run ends, so a campaign stopped (a signal, a node lost, the driver killed) keeps what finished;
``--resume`` skips every job whose run folder is complete and runs the rest, never touching a finished folder.
A Ray head lost mid-campaign ends every job not finished as ``lost`` (the executor stops waiting on it); no job of
a campaign that ends otherwise than by the driver being killed stays ``pending``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlharness.cluster.campaign_file import CampaignSpec, SystemSpec
from mlharness.cluster.executor import Executor
from mlharness.cluster.jobs import Constraints, NodeInfo, RunJob, RunOutcome
from mlharness.cluster.shipping import is_builtin, manifest_files, origin_env
from mlharness.errors import ManifestError, SettingsError

log = logging.getLogger(__name__)

RECORD = "campaign.json"
# what a finished run folder holds, whatever its mode (the metadata is written last, once LoadGen's logs are in)
COMPLETE_FILES = ("mlharness_run.json", "mlperf_log_summary.txt", "mlperf_log_detail.txt")


NODE_GONE = "node gone, not rerun"  # a --resume'd job pinned (on: each) to a node that no longer runs anything


@dataclass
class Plan:
    jobs: list[RunJob]
    systems: dict[str, list[NodeInfo]] = field(default_factory=dict)  # system name -> the nodes it matches
    gone: dict[str, tuple[NodeInfo, str]] = field(default_factory=dict)  # job key -> its pinned node, why it is gone


def constraints_of(system: SystemSpec) -> Constraints:
    return Constraints(accelerator=system.accelerator, accelerators=system.accelerators,
                       min_memory_gb=system.min_memory_gb, frameworks=tuple(sorted(system.frameworks.items())),
                       labels=tuple(sorted(system.labels.items())), cpus=system.cpus)


def node_tag(node: NodeInfo) -> str:
    """A node's part of a folder name: its id's first 12 characters (Ray's ids are 56 hex digits)."""
    return "".join(c for c in node.node_id[:12] if c.isalnum() or c in "-_.") or "node"


def _models(spec: CampaignSpec, base: Path) -> list[tuple[str, str, tuple[tuple[str, bytes], ...], tuple]]:
    """(label, reference the run names, files shipped, the run's extra environment) per model; a manifest file is
    shipped (its record names the user's file: shipping.ORIGIN_ENV), a name is not."""
    out = []
    for i, ref in enumerate(spec.models):
        path = (base / ref).expanduser()
        if path.is_file():
            rel, files = manifest_files(path, f"manifests/{i}")
            out.append((path.stem, rel, files, (origin_env(path, files),)))
        elif is_builtin(ref):
            out.append((ref, ref, (), ()))
        else:
            raise ManifestError(base / "<campaign>", f"models[{i}]", f"{ref!r} is neither a built-in manifest "
                                f"(`mlharness manifest list`) nor a file (relative to {base})")
    labels = [label for label, *_ in out]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ManifestError(base / "<campaign>", "models", f"two models would share the results folder "
                            f"{', '.join(twice)}: give their manifest files different names")
    return out


def _gone_nodes(system: SystemSpec, live: list[NodeInfo], executor: Executor,
                earlier: dict[str, Any] | None) -> dict[str, tuple[NodeInfo, str]]:
    """The nodes an earlier run of the campaign pinned ``system``'s jobs to (``on: each``) that it no longer
    matches: node id -> (the node as last known, why its jobs cannot run again)."""
    pinned = {e.get("pinned") or (e.get("node") or {}).get("node_id") for e in (earlier or {}).get("jobs", [])
              if isinstance(e, dict) and e.get("system") == system.name and e.get("on") == "each"}
    pinned -= {None, *(n.node_id for n in live)}
    known = {n.node_id: n for n in executor.nodes()}
    out = {}
    for node_id in sorted(str(n) for n in pinned):
        node = known.get(node_id) or NodeInfo(node_id=node_id, address="?", alive=False)
        why = "the node is gone" if not node.alive else "the node no longer meets the system's constraints"
        out[node_id] = (node, f"{NODE_GONE}: {why} ({node.short()}); its runs that finished are kept")
    return out


def expand(spec: CampaignSpec, executor: Executor, base: Path, source: Path | None = None,
           earlier: dict[str, Any] | None = None, share_host: bool = False) -> Plan:
    """Every run job of the campaign, in a stable order with stable keys (``dest``). A system no live node
    matches is an error naming it (exit status 2): nothing starts. ``earlier``: the ``campaign.json`` a resumed
    campaign continues; its jobs pinned to a node that is gone stay in the plan, marked in ``Plan.gone``.
    ``share_host`` (``--share-host``): the runs start without waiting for other runs on their host
    (:mod:`mlharness.cluster.hostlock`)."""
    models = _models(spec, base)
    datasets = [str((base / d).expanduser()) for d in spec.datasets] or [None]
    plan = Plan(jobs=[])
    for system in spec.systems:
        c = constraints_of(system)
        nodes = executor.matching(c)
        gone = _gone_nodes(system, nodes, executor, earlier) if system.on == "each" else {}
        if not nodes and not gone:
            raise SettingsError(f"{source or 'campaign'}: system '{system.name}' ({c.describe()}): no live node of "
                                f"the {executor.name} cluster matches; `mlharness cluster nodes` lists them")
        plan.systems[system.name] = nodes
        every = nodes + [node for node, _ in gone.values()]
        pinned = [(f"{system.name}@{node_tag(n)}", replace(c, node=n.node_id), n)
                  for n in every] if system.on == "each" else [(system.name, c, None)]
        for sys_label, constraints, node in pinned:
            for label, ref, files, env in models:
                for dataset in datasets:
                    model_part = label if len(datasets) == 1 else f"{label}~{Path(str(dataset)).name}"
                    for scenario in spec.scenarios:
                        for mode in spec.modes:
                            dest = f"{sys_label}/{model_part}/{scenario}/{mode}"
                            argv = ["run", "--manifest", ref, "--scenario", scenario, "--mode", mode,
                                    "--system", system.name, "--no-progress", *spec.options.flags()]
                            if dataset:
                                argv += ["--dataset-path", dataset]
                            meta = {"system": system.name, "on": system.on, "model": label, "scenario": scenario,
                                    "mode": mode, "node": node.node_id if node else None,
                                    "manifest": json.loads(env[0][1]) if env else {"name": ref},
                                    "options": list(spec.options.flags())}
                            plan.jobs.append(RunJob(key=dest, argv=tuple(argv), dest=dest, constraints=constraints,
                                                    timeout_s=spec.timeout_s, env=env, files=files, meta=meta,
                                                    share_host=share_host))
                            if node is not None and node.node_id in gone:
                                plan.gone[dest] = gone[node.node_id]
    return plan


def complete(folder: Path) -> bool:
    """A finished run folder: its LoadGen logs and its metadata (written last) are there."""
    return folder.is_dir() and all((folder / name).is_file() for name in COMPLETE_FILES)


def _node_record(node: NodeInfo | None) -> dict[str, Any] | None:
    if node is None:
        return None
    return {"node_id": node.node_id, "address": node.address, "resources": node.resources, "labels": node.labels,
            "facts": node.facts}


class Record:
    """``campaign.json``: one entry per job, rewritten (atomically) as each run ends."""

    def __init__(self, root: Path, spec_path: Path, executor: str, jobs: list[RunJob]):
        self.path = root / RECORD
        self.lock = threading.Lock()
        old = read_record(root) or {}
        earlier = {e["key"]: e for e in old.get("jobs", [])}
        self.data: dict[str, Any] = {"campaign": str(spec_path), "executor": executor,
                                     "created": old.get("created", time.time()), "jobs": []}
        for job in jobs:
            entry = {"key": job.key, "dest": job.dest, **job.meta, "outcome": "pending", "node": None,
                     "pinned": job.constraints.node}
            prior = earlier.get(job.key)
            if prior and prior.get("outcome") in ("ok", "skipped"):
                entry.update(node=prior.get("node"), started=prior.get("started"), finished=prior.get("finished"))
            self.data["jobs"].append(entry)
        self.index = {e["key"]: e for e in self.data["jobs"]}

    def update(self, outcome: RunOutcome, root: Path, label: str | None = None) -> None:
        with self.lock:
            entry = self.index[outcome.job.key]
            folder = outcome.folder
            entry.update(outcome=label or outcome_label(outcome), rc=outcome.rc,
                         error=outcome.error, attempts=outcome.attempts,
                         folder=os.path.relpath(folder, root) if folder else None)
            if label == NODE_GONE:
                entry["node"] = entry.get("node") or _node_record(outcome.node)
            elif not outcome.skipped:
                entry.update(node=_node_record(outcome.node), started=outcome.started_unix,
                             finished=outcome.finished_unix)
            self.write()

    def unfinished(self, why: str) -> None:
        """Every job still ``pending`` (the driver stops before its run came back) recorded as failed, saying why."""
        with self.lock:
            for entry in self.data["jobs"]:
                if entry.get("outcome") == "pending":
                    entry.update(outcome="failed", error=f"not finished: {why}")
            self.write()

    def write(self) -> None:
        self.data["updated"] = time.time()
        tmp = self.path.with_name(f".{RECORD}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        os.replace(tmp, self.path)


def outcome_label(outcome: RunOutcome) -> str:
    """How ``campaign.json`` names an outcome (a job pinned to a node that is gone: :data:`NODE_GONE`; a run the
    cluster's head was lost under: ``lost``)."""
    return ("skipped" if outcome.skipped else "ok" if outcome.ok else "cancelled" if outcome.cancelled
            else "lost" if outcome.lost else "failed")


RECORD_LIMIT = 256 << 20  # a record of a million jobs is some hundreds of MiB; a device is refused


def read_record(root: Path) -> dict[str, Any] | None:
    """The campaign's record, or None where there is none (or it is not JSON: it is rewritten whole). A record
    path that is not a regular file (a FIFO, a device) is refused naming it, never waited on."""
    from mlharness import fileguard

    path = root / RECORD
    if not os.path.lexists(path):
        return None
    fileguard.check_regular_file(path, "the campaign's record", error=SettingsError)
    try:
        data = fileguard.read_json(path, "the campaign's record", RECORD_LIMIT, error=ValueError, allow_nan=True)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def index_results(root: Path) -> None:
    """Bring the results root's evaluation database up to date as a run lands, so the campaign's runs are in it
    without a query first (:func:`mlharness.results_db.at_commit.index_quietly`). A database that cannot be
    written is one notice: the run is landed and recorded all the same."""
    from mlharness.results_db.at_commit import index_quietly

    index_quietly(root)


def changed_since(plan: Plan, earlier: dict[str, Any] | None, root: Path) -> list[str]:
    """The finished runs a resume would keep although they were made with other run options or another manifest
    than the plan's (as ``campaign.json`` recorded them): one line each."""
    prior = {e.get("key"): e for e in (earlier or {}).get("jobs", []) if isinstance(e, dict)}
    lines = []
    for job in plan.jobs:
        entry = prior.get(job.key)
        if entry is None or not complete(root / job.dest):
            continue
        was, now = entry.get("options"), job.meta.get("options")
        if was is not None and now is not None and list(was) != list(now):
            lines.append(f"{job.key}: run with options {' '.join(was) or '(none)'}, now {' '.join(now) or '(none)'}")
        was_sha = (entry.get("manifest") or {}).get("sha256")
        now_sha = (job.meta.get("manifest") or {}).get("sha256")
        if was_sha and now_sha and was_sha != now_sha:
            lines.append(f"{job.key}: run with another version of {job.meta['manifest'].get('path')} "
                         f"(sha256 {was_sha[:12]}, now {now_sha[:12]})")
    return lines


def run_campaign(plan: Plan, executor: Executor, root: Path, spec_path: Path, resume: bool,
                 on_done: Callable[[RunOutcome], None] | None = None,
                 accept_changed: bool = False) -> list[RunOutcome]:
    """Run the plan's jobs (skipping complete ones with ``resume``); every outcome in the plan's order. A resume
    that would keep runs made with other options or another manifest is refused, naming them, unless
    ``accept_changed``."""
    root.mkdir(parents=True, exist_ok=True)
    done = [job for job in plan.jobs if (root / job.dest).exists()]
    if not resume and (done or (root / RECORD).exists()):
        what = f"runs of this campaign ({done[0].dest}, ...)" if done else f"a {RECORD}"
        raise SettingsError(f"{root} already holds {what}: pass --resume to run only what is missing or failed, "
                            f"or give another --results folder")
    changed = changed_since(plan, read_record(root), root) if resume else []
    if changed and not accept_changed:
        shown = "; ".join(changed[:5]) + (f"; and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise SettingsError(f"--resume would keep {len(changed)} finished run(s) of {root} made otherwise than the "
                            f"campaign now asks: {shown}. Give another --results folder, move those runs away, or "
                            "pass --accept-changed to keep them as they are")
    record = Record(root, spec_path, executor.name, plan.jobs)
    outcomes: dict[str, RunOutcome] = {}
    for job in plan.jobs:
        folder = root / job.dest
        if complete(folder):
            skipped = RunOutcome(job=job, ok=True, rc=0, node=None, folder=folder, skipped=True, attempts=0)
            outcomes[job.key] = skipped
            record.update(skipped, root)
        elif job.key in plan.gone:  # pinned to a node that is gone: reported, never placed elsewhere
            node, why = plan.gone[job.key]
            lost = RunOutcome(job=job, ok=False, rc=None, node=node, folder=None, error=why, attempts=0)
            outcomes[job.key] = lost
            record.update(lost, root, NODE_GONE)
        elif folder.exists():  # a folder that is not a finished run (never happens through the executor)
            raise SettingsError(f"{folder} exists but holds no finished run (no {' / '.join(COMPLETE_FILES)}): "
                                f"move it away, then resume")
    record.write()
    todo = [job for job in plan.jobs if job.key not in outcomes]

    def done_one(outcome: RunOutcome) -> None:
        record.update(outcome, root)
        if outcome.ok and not outcome.skipped:
            index_results(root)
        if on_done:
            on_done(outcome)

    try:
        for outcome in executor.run_all(todo, root, done_one) if todo else []:
            outcomes[outcome.job.key] = outcome
            record.update(outcome, root)  # the same entry again: a backend that calls no on_done is recorded too
    except BaseException as e:
        executor.cancel()
        record.unfinished(f"the campaign stopped ({type(e).__name__}: {e})" if str(e) else
                          f"the campaign stopped ({type(e).__name__})")
        raise
    finally:
        record.write()
    return [outcomes[job.key] for job in plan.jobs if job.key in outcomes]
