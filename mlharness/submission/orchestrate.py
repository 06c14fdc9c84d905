"""``mlharness submission run``: every LoadGen test a benchmark's result needs, each in its own process.

Per scenario: the accuracy run, the performance run and the compliance audits of the benchmark (TEST01, plus
TEST04 for ResNet50), then their verification. Each test is ``python -m mlharness.cli run ...`` writing into
the archive's work folder; only when it succeeds do its LoadGen logs move into the results tree (whole folders
swapped at once), while its metadata, log and any other file go to ``.mlharness/runs/``. A failed test stops
the command and leaves every earlier result as it was; its output and log are kept under ``.mlharness/failed/``.
One LoadGen test per process also keeps LoadGen's "one conf file per process" rule.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from mlharness import __version__
from mlharness.errors import MLHarnessError, SettingsError
from mlharness.loadgen import settings as lgs
from mlharness.manifest.loader import load_manifest
from mlharness.paths import AUDIT_DIR
from mlharness.rounds import DEFAULT_ROUND, check_in_suite, get_round
from mlharness.run.destination import exclusive
from mlharness.submission import records, sizing
from mlharness.submission.audits import report_verdicts, scenario_verdicts
from mlharness.submission.layout import Tree, check_system_name
from mlharness.submission.round_check import record_round
from mlharness.submission.rules import MIN_DURATION_MS, compliance_tests_for_model
from mlharness.submission.steps import (
    StepFailed,
    complete,
    failed_before,
    host_child,
    result_line,
    run_step,
)
from mlharness.submission.system import describe_system, load_overrides

log = logging.getLogger(__name__)

__all__ = ["StepFailed", "SubmissionRequest", "Outcome", "run_submission", "audit_config"]


@dataclass
class SubmissionRequest:
    manifest: str
    scenarios: list[str]
    division: str
    submitter: str
    system: str
    results: Path
    resume: bool = False
    framework: str | None = None
    dataset: str | None = None
    dataset_path: str | None = None
    user_conf: Path | None = None
    count: int | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # development overrides (min_duration_ms=...)
    execution: list[str] = field(default_factory=list)  # further `mlharness run` flags (--threads 2 ...)
    extra_tests: list[str] = field(default_factory=list)
    system_overrides: Path | None = None
    dtype: str | None = None  # TEST01 response comparison (None: the manifest's response.element_type)
    dispatch: Any = None  # a dispatch.RemoteSteps: the runs go to an executor's nodes (--cluster); None: here
    command: str = ""  # the command line that reproduces this submission run
    round: str = DEFAULT_ROUND  # the MLPerf round every run is made for (its seeds)
    share_host: bool = False  # --share-host: runs start without waiting for other runs on their host


@dataclass
class Outcome:
    rows: list[dict[str, str]] = field(default_factory=list)  # one per scenario, for the summary table
    failed_audits: list[str] = field(default_factory=list)  # audit checks that failed: exit status 4
    development: list[str] = field(default_factory=list)  # failed audits check --allow-development tolerates
    ran: int = 0
    skipped: int = 0


def audit_config(test: str, mlperf_model: str | None) -> Path:
    """mlharness/audit/<TEST>/<model>/audit.config when the benchmark has its own variant, else
    mlharness/audit/<TEST>/audit.config."""
    specific = AUDIT_DIR / test / (mlperf_model or "") / "audit.config"
    path = specific if mlperf_model and specific.is_file() else AUDIT_DIR / test / "audit.config"
    if not path.is_file():
        raise SettingsError(f"audit config {path} is missing from the mlharness installation")
    return path


def run_submission(req: SubmissionRequest, console: Any) -> Outcome:
    """Every LoadGen test of the request, with the tree locked: a second ``submission run`` on the same tree
    fails at once instead of moving folders under the first one."""
    check_system_name(req.system)
    get_round(req.round)
    for scenario in req.scenarios:
        lgs.check_scenario(scenario, interactive=True)
    loaded = load_manifest(req.manifest, req.dataset, req.framework)
    check_in_suite(req.round, mlperf_benchmark(loaded.model), str(loaded.path))
    preflight_metric(loaded, req)
    tree = Tree(req.results)  # made only once the request's own values are known good
    try:
        tree.archive.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SettingsError(f"cannot create the results tree {tree.root}: {e.strerror}") from e
    with exclusive(tree.archive / "lock", f"results tree {tree.root}"):
        return _run_submission(req, console, loaded)


def preflight_metric(loaded: Any, req: SubmissionRequest) -> None:
    """What the accuracy metric needs beyond the log (bfcl_v4: bfcl-eval's environment), checked before any step
    starts: found missing at the accuracy step or when an audit's responses are scored (TEST01, TEST07), it would
    end the command after hours of performance runs. On a cluster a node's accuracy run checks its own node; only
    the audits' scoring is done here."""
    spec = loaded.model.accuracy
    tests = [*compliance_tests_for_model(loaded.model.mlperf.model), *req.extra_tests]
    if spec is None or (req.dispatch is not None and not {"TEST01", "TEST07"} & set(tests)):
        return
    from mlharness.tasks import METRICS

    try:
        METRICS.get(spec.metric)().preflight(dict(spec.options))
    except MLHarnessError as e:
        raise SettingsError(f"{loaded.path}: accuracy metric {spec.metric} cannot score on this machine, so no "
                            f"step was started: {e}") from e


def mlperf_benchmark(m: Any) -> str | None:
    """The MLPerf benchmark ID a manifest names (``mlperf.benchmark``, else ``mlperf.model``), None for a
    model that names neither (an open-division model, never refused by a round)."""
    return m.mlperf.benchmark or m.mlperf.model


def _run_submission(req: SubmissionRequest, console: Any, loaded: Any) -> Outcome:
    m = loaded.model
    if req.division == "closed" and m.mlperf.model is None:
        raise SettingsError(f"{loaded.path} names no MLPerf benchmark (mlperf.model): it can only be submitted in "
                            f"the open division")
    conf_model = m.mlperf.model or m.name
    benchmark = m.mlperf.benchmark or conf_model
    user_conf = req.user_conf.resolve() if req.user_conf else lgs.default_user_conf(conf_model)
    tests = list(dict.fromkeys([*compliance_tests_for_model(m.mlperf.model), *req.extra_tests]))
    audits = {t: audit_config(t, m.mlperf.model) for t in tests}
    _check_same_index(audits, req)
    tree = Tree(req.results)
    tree.root.mkdir(parents=True, exist_ok=True)
    state = _update_state(tree, req, loaded, benchmark, conf_model)
    for moved in tree.sweep_leftovers():
        console.print(f"moved leftover run folder to {moved}", highlight=False, soft_wrap=True)
    records.snapshot_sources(loaded, tree.src_dir(req.system, benchmark), user_conf, list(audits.values()),
                             AUDIT_DIR, req.command)
    content, notes = records.measurements(loaded)
    state["benchmarks"][f"{req.system}/{benchmark}"]["measurements_notes"] = notes
    tree.write_state(state)
    dev = {k: v for k, v in req.overrides.items() if v is not None}
    if dev or req.count:
        short = dev.get("min_duration_ms", MIN_DURATION_MS) < MIN_DURATION_MS
        rejected = [what for what, hit in ((f"runs shorter than {MIN_DURATION_MS // 1000} s", short),
                                           ("partial datasets", req.count)) if hit]
        where = (f"not submittable in any division: the official checker rejects {' and '.join(rejected)} in "
                 f"every division, open included" if rejected else "not submittable: development settings")
        console.print(f"[yellow]development settings[/] ({', '.join(f'{k}={v}' for k, v in dev.items())}"
                      f"{', count=' + str(req.count) if req.count else ''}): {where}", highlight=False, soft_wrap=True)
    for note in notes:
        console.print(f"[yellow]measurements.json:[/] {note}", highlight=False, soft_wrap=True)

    steps = ["accuracy", "performance", *tests]
    outcome = Outcome()
    progress = {"n": 0, "total": len(steps) * len(req.scenarios)}
    plans = []
    for scenario in req.scenarios:
        ids = (req.system, benchmark, scenario)
        # Interactive runs under the '<model>-interactive' settings: its own default user.conf
        scen_conf = user_conf if req.user_conf else lgs.default_user_conf(lgs.conf_model_for(conf_model, scenario))
        argvs = {step: _child_argv(req, loaded.path, scenario, step, tree.work_dir(*ids) / step, scen_conf,
                                   audits.get(step)) for step in steps}
        for step, argv in argvs.items():
            if _audit_dataset(loaded, step):  # later flags win: the audit's own dataset manifest
                argv += ["--dataset", str(_audit_dataset(loaded, step))]
        plans.append((scenario, ids, scen_conf, argvs))
    if req.dispatch is not None:  # every scenario's accuracy and performance runs are independent: all at once
        for _, ids, scen_conf, argvs in plans:
            _prefetch(tree, req, ids, {s: argvs[s] for s in ("accuracy", "performance")}, loaded, scen_conf)
    for scenario, ids, scen_conf, argvs in plans:
        files = {
            "user.conf": lgs.effective_user_conf(scen_conf, conf_model, scenario, dev),
            "measurements.json": json.dumps(content, indent=2) + "\n",
            "README.md": records.readme(benchmark, scenario, req.system, req.command,
                                        [(s, _display(a)) for s, a in argvs.items()], notes, m.name),
        }
        _run_scenario(tree, req, ids, argvs, files, loaded, scen_conf, console, outcome, progress, conf_model)
        row = {"benchmark": benchmark, "scenario": scenario,
               "accuracy": result_line(tree.scenario_dir(*ids), "accuracy", scenario),
               "performance": result_line(tree.scenario_dir(*ids), "performance", scenario,
                                          tree.record_dir(*ids, "performance"))}
        report_verdicts(tree, ids, scenario_verdicts(tree, ids, tests, req.dtype), row, console, outcome)
        outcome.rows.append(row)
    tree.sweep_leftovers()
    return outcome


def _run_scenario(tree: Tree, req: SubmissionRequest, ids: tuple[str, str, str], argvs: dict[str, list[str]],
                  files: dict[str, str], loaded: Any, user_conf: Path | None, console: Any, outcome: Outcome,
                  progress: dict[str, int], conf_model: str) -> None:
    """The scenario's LoadGen tests in order. Its user.conf, measurements.json and README.md are written once
    a test has succeeded, so a scenario that never ran leaves no directory behind. The compliance runs get the
    user.conf the performance run used (:mod:`mlharness.submission.sizing`)."""
    scen_dir = tree.scenario_dir(*ids)
    used: Path | None = None
    for step, argv in argvs.items():
        if used is not None and step != "accuracy":
            argv = sizing.set_user_conf(argv, used)
        progress["n"] += 1
        label = f"[{progress['n']}/{progress['total']}] {ids[1]} {ids[2]} {step}"
        signature = _signature(argv, loaded, user_conf)
        if req.resume and failed_before(tree, ids, step):
            console.print(f"{label}: failed its verification before, run again (--resume)", highlight=False)
        if req.resume and complete(tree, ids, step, signature):
            console.print(f"[dim]- {label}: complete, skipped (--resume)[/]", highlight=False)
            outcome.skipped += 1
        else:
            with console.status(f"{label} ..."):
                seconds = run_step(tree, ids, step, argv, signature, _remote(req, ids, step))
            line = result_line(scen_dir, step, ids[2], tree.record_dir(*ids, step))
            console.print(f"[green]✓[/] {label} ({seconds:.1f} s): {line}", highlight=False, soft_wrap=True)
            outcome.ran += 1
            if used is not None:  # an audit's own performance run INVALID for its size alone: once more, resized
                sizing.resize_audit(tree, ids, step, conf_model, used, _rerun(tree, req, ids, step, argv, loaded),
                                    lambda text: console.print(f"[yellow]{escape(text)}[/]", highlight=False))
        if step == "performance":
            used = _sized_performance(tree, ids, argv, loaded, conf_model, console, outcome, files, req)
            if req.dispatch is not None:  # the audits need the performance run's user.conf: now all at once
                _prefetch(tree, req, ids, {s: sizing.set_user_conf(a, used) if used is not None else a
                                           for s, a in argvs.items() if s not in ("accuracy", "performance")},
                          loaded, user_conf)
        for name, text in files.items():
            (scen_dir / name).write_text(text)


def _sized_performance(tree: Tree, ids: tuple[str, str, str], argv: list[str], loaded: Any, conf_model: str,
                       console: Any, outcome: Outcome, files: dict[str, str],
                       req: SubmissionRequest | None = None) -> Path | None:
    """After the performance run: a calibrated run that is INVALID is repeated with the explained fix (a few
    times); one that stays INVALID stops the command. Returns the user.conf the VALID run used, if calibrated."""
    exp = sizing.verdict(tree, ids, conf_model)
    conf = sizing.used_conf(tree, ids)
    tries = 1
    while not exp.valid and conf is not None and exp.fixes and tries <= sizing.RETRIES:
        conf = sizing.with_fixes(conf, exp, tries)
        console.print(f"[yellow]{'/'.join(ids[1:])} performance INVALID[/] ({', '.join(exp.failed)} not met): "
                      f"again with {', '.join(f.flag for f in exp.fixes)}", highlight=False, soft_wrap=True)
        retry = sizing.set_user_conf(argv, conf)
        seconds = run_step(tree, ids, "performance", retry, _signature(retry, loaded, conf),
                           _remote(req, ids, "performance") if req else None)
        outcome.ran += 1
        tries += 1
        line = result_line(tree.scenario_dir(*ids), "performance", ids[2], tree.record_dir(*ids, "performance"))
        console.print(f"[green]✓[/] {ids[1]} {ids[2]} performance ({seconds:.1f} s): {line}", highlight=False)
        exp = sizing.verdict(tree, ids, conf_model)
    if not exp.valid:
        raise sizing.PerformanceInvalid(sizing.invalid_message(ids, exp, tries))
    if conf is None:
        return None
    files["user.conf"] = lgs.read_conf(conf, "user.conf")
    return sizing.keep(tree, ids, conf)


def _rerun(tree: Tree, req: SubmissionRequest, ids: tuple[str, str, str], step: str, argv: list[str],
           loaded: Any) -> Any:
    """The step run again with another user.conf (:func:`mlharness.submission.sizing.resize_audit`)."""
    def rerun(conf: Path) -> None:
        retry = sizing.set_user_conf(argv, conf)
        run_step(tree, ids, step, retry, _signature(retry, loaded, conf), _remote(req, ids, step))
    return rerun


def _remote(req: SubmissionRequest, ids: tuple[str, str, str], step: str) -> Any:
    """The step's child on the executor (``--cluster``), else a local process started when the host is free of
    other runs (``host_child``), or None with ``--share-host``: a local process started at once."""
    if req.dispatch is not None:
        return req.dispatch.child(ids, step)
    return None if req.share_host else host_child(f"mlharness submission step {'/'.join(ids)} {step}")


def _prefetch(tree: Tree, req: SubmissionRequest, ids: tuple[str, str, str], argvs: dict[str, list[str]],
              loaded: Any, user_conf: Path | None) -> None:
    """Start these steps' runs on the executor now (not those ``--resume`` will skip); each step takes its
    result when the command reaches it."""
    for step, argv in argvs.items():
        if not (req.resume and complete(tree, ids, step, _signature(argv, loaded, user_conf))):
            req.dispatch.submit(ids, step, argv)


def _update_state(tree: Tree, req: SubmissionRequest, loaded: Any, benchmark: str, conf_model: str) -> dict:
    state = tree.read_state()
    for key in ("division", "submitter"):
        if state.get(key) not in (None, getattr(req, key)):
            raise SettingsError(f"{tree.root} holds results for {key} '{state[key]}', not '{getattr(req, key)}': "
                                f"use another --results folder")
    record_round(tree, state, req.round)
    state.update(division=req.division, submitter=req.submitter, mlharness_version=__version__)
    # overrides given once stay recorded: a later run without --system-overrides keeps them
    recorded = state.setdefault("systems", {}).get(req.system, {}).get("overrides", {})
    overrides = {**recorded, **load_overrides(req.system_overrides)}
    desc = describe_system(overrides, submission={"division": req.division, "submitter": req.submitter,
                                                  "system_name": req.system})
    state["systems"][req.system] = {"fields": desc.fields, "sources": desc.sources, "overrides": overrides}
    entry = state.setdefault("benchmarks", {}).setdefault(f"{req.system}/{benchmark}", {})
    # variants share their benchmark's folder (llama3.1-8b-oracle and -random both write llama3.1-8b/)
    if entry.get("model") not in (None, loaded.model.name) and entry.get("scenarios"):
        raise SettingsError(f"{tree.root} holds {benchmark} results of the manifest '{entry['model']}', not "
                            f"'{loaded.model.name}': a benchmark's folder holds the results of one model; use "
                            f"another --results folder")
    entry.update(manifest=str(loaded.path), model=loaded.model.name, mlperf_model=loaded.model.mlperf.model,
                 conf_model=conf_model, command=req.command)
    entry["scenarios"] = sorted(set(entry.get("scenarios", [])) | set(req.scenarios))
    return state


def _child_argv(req: SubmissionRequest, manifest: Path, scenario: str, step: str, output: Path,
                user_conf: Path | None, audit: Path | None) -> list[str]:
    argv = [sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--scenario", scenario,
            "--mode", "accuracy" if step == "accuracy" else "performance", "--output", str(output),
            "--system", req.system, "--no-progress", "--round", req.round]
    for flag, value in (("--framework", req.framework), ("--dataset", req.dataset),
                        ("--dataset-path", req.dataset_path), ("--user-conf", user_conf), ("--count", req.count)):
        if value is not None:
            argv += [flag, str(value)]
    for key, value in req.overrides.items():
        if value is None or not _applies(key, scenario):
            continue
        argv += ["--" + key.replace("_", "-"), str(value)]
    argv += req.execution
    if audit is not None:
        argv += ["--audit-config", str(audit)]
    return argv


def _check_same_index(audits: dict[str, Path], req: SubmissionRequest) -> None:
    """An audit that issues one loaded sample over and over (TEST04: ``performance_issue_same_index``) needs a
    loaded set that holds that index; LoadGen reads past its own list otherwise."""
    loaded = req.overrides.get("performance_sample_count") or req.count
    for test, path in audits.items():
        found = re.findall(r"^\s*\S+\.performance_issue_same_index\s*=\s*(\d+)", lgs.read_conf(path, f"{test} audit config"), re.M)
        if loaded is not None and found and int(found[-1]) >= loaded:
            raise SettingsError(f"{test} issues sample {found[-1]} of the loaded set over and over ({path}), but "
                                f"the runs load {loaded} sample(s): pass --count (or --performance-sample-count) "
                                f"of at least {int(found[-1]) + 1}")


def _audit_dataset(loaded: Any, step: str) -> str | None:
    """The dataset manifest an audit runs on when the model names one (``attributes.audit_datasets``, e.g.
    gpt-oss-120b's TEST07 on its GPQA compliance set)."""
    datasets = loaded.model.attributes.get("audit_datasets") or {}
    return str(datasets[step]) if isinstance(datasets, dict) and step in datasets else None


def _applies(override: str, scenario: str) -> bool:
    """Development overrides that only exist for some scenarios are passed to those only."""
    return {"target_qps": scenario in ("Offline", "Server", "Interactive"), "target_latency_ms": scenario != "Offline",
            "samples_per_query": scenario == "MultiStream"}.get(override, True)


def _display(argv: list[str]) -> str:
    return shlex.join(["mlharness", *argv[3:]])


def _signature(argv: list[str], loaded: Any, user_conf: Path | None) -> str:
    import hashlib

    parts = [json.dumps(argv), loaded.source.sha256, lgs.read_conf(user_conf, "user.conf") if user_conf else ""]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
