"""The checker's rules for a scenario directory in the MLCommons *endpoints* layout (written by
:mod:`mlharness.submission.endpoints`), as the official v6.1 checker holds it: ``loader.py`` reads such a
directory when neither ``performance/run_1/mlperf_log_detail.txt`` nor ``accuracy/mlperf_log_detail.txt`` is
there, ``parsers/endpoints_parser.py`` maps its files to LoadGen's keys, and ``checks/*.py`` skip the LoadGen-only
rules (performance sample count, minimum query count, early stopping, the accuracy log's truncation).

The same verdicts as the official checker, finding for finding: the model must be one the round accepts from
the endpoints client; the seeds are the round's; the run lasted at least 600 s; the accuracy run scored the whole
dataset (995) with no failed sample; a score is present; measurements.json, README.md and src/ exist. Two rules
the official checker does not apply to an endpoints qwen3.6-27b result are held here too, and said so in their
messages: the closed division's accuracy target (the checker compares it for qwen3-vl only) and a performance
run without failed turns (the endpoints compliance checker's "0 dropped turns").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mlharness.submission.endpoints import (
    ACCURACY_FILE,
    CONFIG_FILE,
    ENDPOINTS_BENCHMARKS,
    MEASURED_DIR,
    SUMMARY_FILE,
)
from mlharness.submission.findings import Findings
from mlharness.submission.rules import MAX_ACCURACY_LOG_SIZE, MEASUREMENTS_FIELDS, MIN_DURATION_MS, Benchmark
from mlharness.userfiles import read_log_text

SCENARIO_ENTRIES = {"accuracy", "performance", CONFIG_FILE, "measurements.json", "README.md", "user.conf"}
PERF_ENTRIES = {SUMMARY_FILE, MEASURED_DIR}
ACC_ENTRIES = {ACCURACY_FILE, MEASURED_DIR, "accuracy.txt", "mlperf_log_accuracy.json"}
LOADGEN_DETAIL = (("performance", "run_1", "mlperf_log_detail.txt"), ("accuracy", "mlperf_log_detail.txt"))


def is_endpoints_layout(scen_dir: Path) -> bool:
    """The official loader's test: neither LoadGen detail log where a LoadGen result has it."""
    return not any(scen_dir.joinpath(*parts).exists() for parts in LOADGEN_DETAIL)


def nested(data: Any, dotted: str) -> Any:
    """``a/b/c`` of nested dicts, None where a level is missing (keys may hold dots: '99.0' is one key)."""
    for key in dotted.split("/"):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def check_endpoints_scenario(c: Findings, division: str, info: Benchmark | None, scen_dir: Path) -> None:
    for entry in sorted(scen_dir.iterdir()):
        if entry.name not in SCENARIO_ENTRIES:
            c.error(entry, f"extra file: an endpoints-style result holds only {', '.join(sorted(SCENARIO_ENTRIES))}")
    for name in ("measurements.json", "README.md"):  # user.conf: not required of endpoints results
        if not (scen_dir / name).is_file():
            c.error(scen_dir / name, "missing")
        elif (scen_dir / name).stat().st_size == 0:
            c.error(scen_dir / name, "is empty")
    if (scen_dir / "measurements.json").is_file():
        data = c._json(scen_dir / "measurements.json")
        for key in MEASUREMENTS_FIELDS:
            if not str(data.get(key, "")).strip():
                c.error(scen_dir / "measurements.json", f"field '{key}' is missing or empty")
    if info is None or info.name not in ENDPOINTS_BENCHMARKS:
        c.error(scen_dir, f"endpoints submission uses disallowed model '{info.name if info else scen_dir.parent.name}'"
                          f": the checker reads results of the endpoints client for "
                          f"{', '.join(sorted(ENDPOINTS_BENCHMARKS))} only (mlharness writes LoadGen logs for the "
                          f"others)")
    config = _config(c, scen_dir / CONFIG_FILE)
    _check_performance(c, config, scen_dir / "performance")
    _check_accuracy(c, division, info, scen_dir / "accuracy")


def _config(c: Findings, path: Path) -> dict[str, Any]:
    if not path.is_file():
        c.error(path, "missing: the scenario's seeds and minimum duration are read from it")
        return {}
    try:
        data = yaml.safe_load(read_log_text(path, "endpoints config"))
    except yaml.YAMLError as e:
        c.error(path, f"is not valid YAML: {e}")
        return {}
    if not isinstance(data, dict):
        c.error(path, "must hold a YAML mapping")
        return {}
    return data


def _entries(c: Findings, folder: Path, allowed: set[str], required: str) -> bool:
    if not folder.is_dir():
        c.error(folder, "missing")
        return False
    for entry in sorted(folder.iterdir()):
        if entry.name not in allowed:
            c.error(entry, f"extra entry: an endpoints-style {folder.name} folder holds {', '.join(sorted(allowed))}")
    if not (folder / required).is_file():
        c.error(folder / required, "missing")
        return False
    return True


def _check_performance(c: Findings, config: dict[str, Any], perf: Path) -> None:
    if not _entries(c, perf, PERF_ENTRIES, SUMMARY_FILE):
        return
    summary = c._json(perf / SUMMARY_FILE)
    runtime = nested(config, "settings/runtime") or {}
    seeds = c.rules.round.seeds
    for key, seed in (("dataloader_random_seed", "sample_index_rng_seed"),
                      ("scheduler_random_seed", "schedule_rng_seed")):
        if runtime.get(key) != seeds[seed]:
            c.error(perf.parent / CONFIG_FILE, f"{seed} is wrong, expected={seeds[seed]}, found={runtime.get(key)} "
                                               f"(settings.runtime.{key}; the seeds of round {c.rules.round.name})")
    duration = runtime.get("min_duration_ms")
    if not isinstance(duration, (int, float)) or duration < MIN_DURATION_MS:
        c.development(perf.parent / CONFIG_FILE, f"Test duration less than 600s in user config. expected="
                                                 f"{MIN_DURATION_MS}, found={duration} (settings.runtime."
                                                 f"min_duration_ms; the official checker rejects it in every "
                                                 f"division)")
    mean = nested(summary, "latency/avg")
    if not isinstance(mean, (int, float)):
        c.error(perf / SUMMARY_FILE, "has no latency.avg: the SingleStream result (mean latency) is missing")
    else:
        c.row.result = f"{mean / 1e6:,.3f} ms"
    failed = summary.get("n_samples_failed")
    if failed:  # not an error of the official checker (its performance error check needs --submission-exceptions)
        c.error(perf / SUMMARY_FILE, f"{failed} turn(s) of the replay failed; a valid run has none (the endpoints "
                                     f"compliance checker's rule; the official submission checker does not read it)")


def _check_accuracy(c: Findings, division: str, info: Benchmark | None, acc: Path) -> None:
    if not _entries(c, acc, ACC_ENTRIES, ACCURACY_FILE):
        return
    results = c._json(acc / ACCURACY_FILE)
    scores = [s for s in results.get("accuracy_scores") or [] if isinstance(s, dict)]
    values = [s["score"] for s in scores if isinstance(s.get("score"), (int, float))]
    if not values:
        c.error(acc / ACCURACY_FILE, "accuracy score not found (accuracy_scores[].score)")
    else:
        c.row.accuracy = f"mAP {values[0]:g}"
    counted = [s.get("total_samples") for s in scores if s.get("dataset_type") in (None, "accuracy")]
    covered = sum(n for n in counted if isinstance(n, int)) if counted else None
    if info is not None and covered != info.dataset_size:
        c.development(acc / ACCURACY_FILE, f"accurcy run does not cover all dataset, accuracy samples: {covered}, "
                                           f"dataset size: {info.dataset_size} (the official checker's words)")
    if results.get("n_samples_failed"):
        c.error(acc / ACCURACY_FILE, f"has loadgen errors, number of errors: {results['n_samples_failed']}")
    if division != "open" and info is not None and values and values[0] < info.accuracy_target:
        c.error(acc / ACCURACY_FILE, f"mAP {values[0]:g} is below the closed-division target "
                                     f"{info.accuracy_target:.7g} for {info.name} (an MLPerf rule the official "
                                     f"checker does not apply to endpoints results of this model)")
    log = acc / "mlperf_log_accuracy.json"
    if log.is_file() and log.stat().st_size > MAX_ACCURACY_LOG_SIZE:
        c.error(log, f"is {log.stat().st_size} bytes: not truncated (mlharness submission package truncates it)")
