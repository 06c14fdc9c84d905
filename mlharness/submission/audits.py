"""Glue between results trees and :mod:`~mlharness.submission.compliance`: which scenario directories hold
which audits, and how to score sampled responses for TEST01's non-deterministic fallback (the accuracy metric
of the manifest the accuracy run used, on the dataset it used, as recorded in its mlharness_run.json)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from rich.markup import escape

from mlharness.errors import MLHarnessError
from mlharness.fileguard import read_json
from mlharness.loadgen.logs import detail_values
from mlharness.submission.checker_logs import development_finding
from mlharness.submission.compliance import Scorer, Verdict, dtype_for_response, verify_scenario
from mlharness.submission.layout import ARCHIVE, Tree
from mlharness.submission.rules import MIN_DURATION_MS, TEST01_FIGURE_DELTAS, benchmark_for
from mlharness.submission.steps import record_finding, record_verdict
from mlharness.userfiles import RECORD_LIMIT, read_optional_json

log = logging.getLogger(__name__)


def scorer_from_record(metadata_path: Path, reference: str | None = None) -> Scorer | None:
    """A function scoring an accuracy log with the metric, options and dataset of a recorded accuracy run, or
    None when the run's manifest declares no metric (or the record is gone). ``reference``: the metric option
    naming the data file to score against instead (TEST07 of gpt-oss-120b: ``compliance_file``)."""
    meta = read_optional_json(metadata_path, "record of the accuracy run")
    if not isinstance(meta, dict):
        return None
    from mlharness.kinds.registry import data_kind
    from mlharness.manifest.loader import load_manifest
    from mlharness.tasks import METRICS
    from mlharness.tasks.base import AccuracyContext

    try:
        loaded = load_manifest(meta["manifest"]["path"])
    except (MLHarnessError, KeyError) as e:
        log.warning("cannot load the manifest of %s: %s", metadata_path, e)
        return None
    spec = loaded.model.accuracy
    if spec is None:
        return None
    metric = METRICS.get(spec.metric)()
    options = {**data_kind(loaded.model).accuracy_options(loaded.model), **spec.options}  # video: fps, shape
    if reference is not None and reference in options:
        options["reference_file"] = options[reference]
    ctx = AccuracyContext(dataset_path=Path(meta["dataset_path"]) if meta.get("dataset_path") else None,
                          count=int(meta.get("samples", {}).get("total") or 0), options=options)
    return lambda accuracy_log: metric.score(accuracy_log, ctx)


def delta_percent(benchmark: str) -> float | dict[str, float]:
    """TEST01 fallback tolerance: 1% for 99% targets (and models that are not MLPerf benchmarks), 0.1% for 99.9%;
    one per figure where the benchmark has several (stable-diffusion-xl: CLIP 1%, FID 2%)."""
    if benchmark in TEST01_FIGURE_DELTAS:
        return dict(TEST01_FIGURE_DELTAS[benchmark])
    info = benchmark_for(benchmark)
    return info.test01_delta_percent if info else 1.0


def response_dtype(metadata_path: Path) -> tuple[str, str]:
    """(dtype, where it came from) for TEST01: the response element type the accuracy run recorded, else the
    one of the manifest it names, else bytes as the official scripts default to."""
    meta = read_optional_json(metadata_path, "record of the accuracy run")
    if not isinstance(meta, dict):
        return "byte", "the default: no record of the accuracy run"
    element_type = meta.get("response_element_type")
    if element_type:
        return dtype_for_response(element_type), f"response element type {element_type}, from the accuracy run"
    try:
        from mlharness.manifest.loader import load_manifest

        element_type = load_manifest(meta["manifest"]["path"]).model.response.element_type
    except (MLHarnessError, KeyError, TypeError) as e:
        log.warning("cannot load the manifest of %s: %s", metadata_path, e)
        return "byte", "the default: the accuracy run's manifest cannot be read"
    return dtype_for_response(element_type), f"response element type {element_type}, from the manifest"


def scenario_verdicts(tree: Tree, ids: tuple[str, str, str], tests: list[str],
                      dtype: str | None = None) -> list[Verdict]:
    """Verify a scenario's audits; TEST01 compares in ``dtype``, by default the response dtype of the run."""
    record = tree.record_dir(*ids, "accuracy") / "mlharness_run.json"
    source = "given on the command line"
    if dtype is None:
        dtype, source = response_dtype(record)
    scorer = scorer_from_record(record) if "TEST01" in tests else None
    eos = eos_ids_from_record(record) if "TEST06" in tests else None
    test07 = scorer_from_record(record, reference="compliance_file") if "TEST07" in tests else None
    verdicts = verify_scenario(tree.scenario_dir(*ids), tests, dtype, scorer, delta_percent(ids[1]), source, eos,
                               test07)
    checks: dict[str, dict[str, bool]] = {}
    for v in verdicts:
        checks.setdefault(v.test, {})[v.check] = v.passed
    for test, outcome in checks.items():
        record_verdict(tree, ids, test, outcome)
        failed = [check for check, passed in outcome.items() if not passed]
        record_finding(tree, ids, test, development_finding(test, failed, tree.scenario_dir(*ids) / test))
    return verdicts


def noise_note(scenario_dir: Path, verdict: Verdict) -> str | None:
    """For a failed TEST01 / TEST04 performance comparison of runs shorter than the official minimum: the
    figures of such runs vary on a busy host by more than the band, so the verdict (which stands, as the
    official script gives it) says little about the system; the note says how long the runs must be."""
    if verdict.passed or verdict.check != "performance" or verdict.test not in ("TEST01", "TEST04"):
        return None
    durations = []
    for run in (scenario_dir / "performance", scenario_dir / verdict.test / "performance"):
        try:
            durations.append(int(detail_values(run / "run_1" / "mlperf_log_detail.txt")["effective_min_duration_ms"]))
        except (OSError, MLHarnessError, KeyError, TypeError, ValueError):
            continue
    if not durations or min(durations) >= MIN_DURATION_MS:
        return None
    load = ""
    with contextlib.suppress(OSError, AttributeError):
        avg, cores = os.getloadavg()[0], os.cpu_count() or 1
        if avg > cores / 2:
            load = f" (load average now {avg:.1f} on {cores} cores)"
    return (f"{verdict.test} compared runs of {min(durations) / 1000:g} s{load}: at development durations on a busy "
            f"host the performance figures vary by more than this band, so the verdict says little about the "
            f"system. The band is meant for runs of at least {MIN_DURATION_MS // 1000} s (the official "
            f"min_duration; leave out --min-duration-ms, or pass --min-duration-ms {MIN_DURATION_MS}); the "
            f"verdict stands as the official script gives it")


def eos_ids_from_record(metadata_path: Path) -> set[int]:
    """TEST06: the EOS ids of the model the accuracy run used (its manifest's tokenizer / generation config)."""
    from mlharness.manifest.loader import load_manifest
    from mlharness.submission.test06 import eos_ids_for_manifest

    try:
        meta = read_json(metadata_path, "record of the accuracy run", RECORD_LIMIT, allow_nan=True)
        return eos_ids_for_manifest(load_manifest(meta["manifest"]["path"]))
    except (KeyError, TypeError, MLHarnessError) as e:
        raise MLHarnessError(f"TEST06 needs the model's EOS ids, from the manifest of the accuracy run recorded in "
                             f"{metadata_path}: {e}") from e


def find_audited(root: Path, test: str) -> list[Path]:
    """Scenario directories under ``root`` (or ``root`` itself) that hold ``test``'s directory."""
    root = Path(root).resolve()
    candidates = [root] + sorted(p.parent for p in root.rglob(test) if p.is_dir() and ARCHIVE not in p.parts)
    return [c for c in dict.fromkeys(candidates) if (c / test).is_dir() and (c / "performance").is_dir()]


def verify_directory(scenario_dir: Path, test: str, dtype: str | None = None) -> list[Verdict]:
    """Re-verify one audit of a scenario directory, finding its results tree's archive (for the TEST01
    fallback) when the directory is inside one."""
    scenario_dir = Path(scenario_dir).resolve()
    for parent in scenario_dir.parents:
        if (parent / ARCHIVE).is_dir():
            rel = scenario_dir.relative_to(parent).parts
            if len(rel) == 3:
                return scenario_verdicts(Tree(parent), (rel[0], rel[1], rel[2]), [test], dtype)
            break
    source = "given on the command line" if dtype else "the default: outside a results tree, no record of the run"
    return verify_scenario(scenario_dir, [test], dtype or "byte", None, delta_percent(scenario_dir.parent.name),
                           source)


def report_verdicts(tree: Tree, ids: tuple[str, str, str], verdicts: list[Verdict], row: dict[str, str],
                    console: Any, outcome: Any) -> None:
    """Each audit's verdict on the terminal and in the summary row. A failed audit that `submission check
    --allow-development` lists as a development finding (a performance comparison of runs shorter than the
    official duration: :func:`~mlharness.submission.checker_logs.development_finding`, check's own rule) is
    reported in check's words and recorded beside the audit's verdict, but is no failure of this command; any
    other failed check is one (exit status 4). ``outcome``: the command's (orchestrate.Outcome)."""
    by_test: dict[str, list[Verdict]] = {}
    for verdict in verdicts:
        by_test.setdefault(verdict.test, []).append(verdict)
        colour = "green" if verdict.passed else "red"
        console.print(f"  {verdict.test} {verdict.check}: [{colour}]{verdict.label}[/]"
                      + ("" if verdict.passed else f": {escape(verdict.reason)}"), highlight=False, soft_wrap=True)
    scen_dir = tree.scenario_dir(*ids)
    for test, checks in by_test.items():
        failed = [v.check for v in checks if not v.passed]
        finding = development_finding(test, failed, scen_dir / test)  # recorded by scenario_verdicts
        row[test] = "PASS" if not failed else "FAIL (development)" if finding else "FAIL"
        if finding:
            where = f"{'/'.join(ids[1:])} {test}"
            outcome.development.append(f"{where}: {finding}")
            console.print(f"  [yellow]development finding[/] ({escape(where)}): {escape(finding)} (tolerated by "
                          f"`submission check --allow-development`; not submittable)", highlight=False,
                          soft_wrap=True)
            continue
        for verdict in (v for v in checks if not v.passed):
            outcome.failed_audits.append(f"{ids[1]}/{ids[2]} {verdict.test} {verdict.check}")
            note = noise_note(scen_dir, verdict)
            if note:
                console.print(f"  [yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
