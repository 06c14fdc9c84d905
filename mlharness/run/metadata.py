"""The run metadata (``mlharness_run.json``): what ran (manifest and dataset hashes, framework, LoadGen version,
round and effective seeds, settings, batching), what came out (result, accuracy, calibration, telemetry) and
whether the run is submittable, with every reason it is not."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlharness import __version__
from mlharness.calibration.explain import error_texts as explain_errors
from mlharness.calibration.explain import explain, waive
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import Summary
from mlharness.predictors.base import Predictor
from mlharness.run.factory import model_file_facts
from mlharness.run.options import Measured
from mlharness.run.plan import LoadgenSettings, RunPlan
from mlharness.tasks.base import AccuracyResult
from mlharness.telemetry.energy import per_sample
from mlharness.telemetry.sysinfo import host_facts
from mlharness.userfiles import read_log_text

SEED_KEYS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
ORIGIN_ENV = "MLHARNESS_MANIFEST_ORIGIN"  # cluster/shipping.py: the user's file of a manifest shipped to a node
LABEL_ENV = "MLHARNESS_RUN_LABEL"  # the user's label of a run (a change under test, a ticket), recorded as given
LABEL_MAX = 256
GIT_TIMEOUT_S = 5.0
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def not_submittable(run: RunPlan, conf: LoadgenSettings, detail: dict[str, Any]) -> list[str]:
    """Why the official checker would refuse this run (empty when it would not)."""
    given = conf.plan.overrides.given()
    reasons = list(conf.plan.not_submittable)
    if given:
        reasons.append(f"development overrides: {', '.join(f'{k}={v}' for k, v in given.items())}")
    if run.count:
        reasons.append(f"--count {run.count} limits the dataset")
    if not run.official:
        reasons.append("the manifest names no MLPerf benchmark (mlperf.model): not an official benchmark")
    if detail["errors"]:
        reasons.append(f"LoadGen logged errors: {'; '.join(explain_errors(detail['errors']))}")
    return reasons


def round_verdict(run: RunPlan, conf: LoadgenSettings, summary: Summary, outdir: Path) -> tuple[bool, str | None]:
    """mlharness's verdict on the run under its round's rules, and why it differs from LoadGen's line (None where it
    does not): a performance run LoadGen calls INVALID for early stopping alone is VALID for a benchmark whose
    results the round's checker reads as endpoints results (:func:`mlharness.calibration.explain.waive`)."""
    if run.mode != "performance" or summary.valid:
        return summary.valid, None
    path = outdir / "mlperf_log_summary.txt"
    text = read_log_text(path, "LoadGen summary") if path.is_file() else ""
    scenario = "Server" if summary.scenario == "Interactive" else summary.scenario
    exp = waive(explain(text, [], scenario, conf.plan.model), conf.plan.round, conf.plan.model)
    return exp.valid, exp.waived


def run_metadata(run: RunPlan, conf: LoadgenSettings, predictors: list[Predictor],
                 measured: Measured, accuracy: AccuracyResult | None, outdir: Path) -> dict[str, Any]:
    loaded, plan, sut, strategy = run.loaded, conf.plan, measured.sut, measured.strategy
    detail, summary = measured.detail, measured.summary
    reasons = not_submittable(run, conf, detail)
    valid, waived = round_verdict(run, conf, summary, outdir)
    return {
        "mlharness_version": __version__,
        # which code produced the result: the checkout's commit when mlharness runs from one, else None
        **source_commit(),
        "label": (os.environ.get(LABEL_ENV) or "")[:LABEL_MAX] or None,
        "manifest": manifest_record(loaded),
        "dataset_manifest": (
            {"name": loaded.dataset.name, "sha256": (loaded.dataset_source or loaded.source).sha256}
            if loaded.dataset else None),
        "benchmark": run.benchmark,
        "dataset_path": run.ctx.get("dataset_path"),  # as init() left it: what the accuracy metric scored against
        "conf_model": plan.model,
        "official_benchmark": plan.official,
        "scenario": run.scenario,
        "mode": run.mode,
        "response_element_type": loaded.model.response.element_type,  # what TEST01 compares the responses in
        "submittable": not reasons,
        "not_submittable_reasons": reasons,
        "framework": {"name": loaded.model.framework.name, "version": run.framework_version},
        "predictor": {**predictors[0].describe(), "instances": len(predictors)},
        "model_file": model_file_facts(loaded, getattr(predictors[0].config, "model_path", None)),
        "loadgen_version": importlib.metadata.version("mlcommons-loadgen"),
        "round": plan.round,
        "loadgen_seeds": {k: detail.get(f"effective_{k}") for k in SEED_KEYS},
        "user_conf": str(plan.user_conf) if plan.user_conf else None,
        "audit_config": str(plan.audit_config) if plan.audit_config else None,
        "overrides": plan.overrides.given(),
        "settings": lgs.describe_settings(conf.settings),
        "batching": {"strategy": strategy.name, "max_batchsize": run.batch,
                     "coalesce_wait_s": strategy.coalesce_wait_s,
                     "server": getattr(sut, "server_batching", None),
                     "workers": getattr(sut, "n_workers", None), "inline": getattr(sut, "inline", False),
                     "pinned_cores": [sorted(c) for c in sut.affinity] if getattr(sut, "affinity", None) else None},
        "samples": {"total": run.total, "performance_sample_count": conf.performance_count, "issued": sut.issued,
                    "completed": sut.completed, "batches": sut.batches},
        # "valid": the verdict under the round's rules, which every reader takes (report, compare, results,
        # sweeps); "loadgen_valid": LoadGen's own line; "waived": why the two differ (None where they agree)
        "result": {**asdict(summary), "fields": None, "valid": valid, "loadgen_valid": summary.valid,
                   "waived": waived},
        "accuracy": ({"name": accuracy.name, "value": accuracy.value, "text": accuracy.text,
                      "official": accuracy.official,
                      # generated code's sandbox, for metrics that run it (deepseek-r1, gpt-oss-120b)
                      "code_isolation": (accuracy.details or {}).get("code_isolation")} if accuracy else None),
        "latency_bound": plan.latency_bound,  # Server: the bound, where it comes from, the single-sample p99
        "calibration": measured.calibration,
        "loadgen_errors": detail["errors"],
        "host": host_facts(),  # the harness's host; a remote model's hosts are in "agents"
        "agents": predictors[0].remote_agents(),  # each agent's address, host facts, framework, versions
        "executor": executor_entry(),
        "telemetry": _with_energy_per_sample(measured.telemetry, sut.completed),
    }


def _with_energy_per_sample(telemetry: dict[str, Any] | None, completed: int | None) -> dict[str, Any] | None:
    """The telemetry summary, its energy with the joules per completed sample."""
    if not telemetry or not telemetry.get("energy"):
        return telemetry
    return {**telemetry, "energy": per_sample(telemetry["energy"], completed)}


def executor_entry() -> dict[str, str | None] | None:
    """The node that ran this run, as the executor that started it says (``mlharness/cluster/``: it sets these
    variables in the run's environment); None for a run started by hand. ``host`` above is then that node's."""
    backend = os.environ.get("MLHARNESS_EXECUTOR")
    if not backend:
        return None
    return {"backend": backend, "node_id": os.environ.get("MLHARNESS_NODE_ID"),
            "node_address": os.environ.get("MLHARNESS_NODE_ADDRESS")}


@functools.lru_cache(maxsize=4)
def source_commit(package: Path = PACKAGE_DIR) -> dict[str, Any]:
    """``git_commit`` (HEAD of the git checkout ``package`` is the ``mlharness/`` folder of) and ``git_dirty`` (a
    tracked file of that folder differs from it); both None when mlharness is not run from a checkout (installed
    from a wheel, even into a virtual environment inside some other repository) or git is absent or slow."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True,
                                  timeout=GIT_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    none: dict[str, Any] = {"git_commit": None, "git_dirty": None}
    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != Path(package).resolve().parent:
        return none
    commit, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no", "--", ".")
    if not commit or status is None:
        return none
    return {"git_commit": commit, "git_dirty": bool(status)}


def manifest_record(loaded: Any) -> dict[str, Any]:
    """The record's ``manifest``: its name, version, path and digest. A manifest shipped to a cluster's node is
    loaded from the node's temporary copy; when the driver named the user's file with the digest of the bytes it
    shipped (``ORIGIN_ENV``) and they are the bytes loaded, the record keeps the user's path, and the copy's as
    ``shipped_as``."""
    record = {"name": loaded.model.name, "version": loaded.model.version, "path": str(loaded.path),
              "sha256": loaded.source.sha256}
    try:
        origin = json.loads(os.environ.get(ORIGIN_ENV) or "null")
    except ValueError:
        origin = None
    if isinstance(origin, dict) and origin.get("sha256") == loaded.source.sha256 and origin.get("path"):
        record.update(path=str(origin["path"]), shipped_as=str(loaded.path))
    return record
