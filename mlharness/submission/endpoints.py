"""A session benchmark's result in the layout of the MLCommons *endpoints* client, which the v6.1 checker reads
for the models of its ``ENDPOINTS_ALLOWED_MODELS`` (here: qwen3.6-27b, :data:`ENDPOINTS_BENCHMARKS`):

    <scenario>/config.yaml                          the run's settings (seeds, durations, counts, sampling)
    <scenario>/performance/result_summary.json      per-turn latency, TTFT and TPOT rollups, counts, duration
    <scenario>/performance/loadgen_run/             what they were computed from: LoadGen's logs, sessions.jsonl
    <scenario>/accuracy/accuracy_results.json       the BFCL v4 score and the number of samples scored
    <scenario>/accuracy/accuracy.txt, mlperf_log_accuracy.json (truncated by the package), loadgen_run/

Why this layout (``docs/sessions.md``, Submission): the checker holds a LoadGen-style qwen3.6-27b result to 995
performance samples and early stopping, which a replay of a few recorded sessions (one LoadGen sample each)
cannot honestly show; it reads an endpoints result only when ``performance/run_1/mlperf_log_detail.txt`` and
``accuracy/mlperf_log_detail.txt`` are both absent, so LoadGen's logs move to ``loadgen_run/`` beside the
files derived from them.

Every figure is derived from the runs: latencies from the per-turn records (a sample of the endpoints client is
one request, i.e. one turn), seeds, durations and counts from LoadGen's detail logs, the score from accuracy.txt,
the sample count from the accuracy log. What was not measured is left out, never filled in.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from mlharness import __version__
from mlharness.errors import MLHarnessError
from mlharness.fileguard import read_json
from mlharness.kinds.sessions.records import read_records
from mlharness.loadgen.logs import detail_values
from mlharness.rounds import ROUNDS
from mlharness.submission.endpoints_stats import series
from mlharness.userfiles import ACCURACY_LOG_LIMIT, read_log_text, read_optional_json

# results written in the endpoints layout: the rounds' table says which (Round.endpoints_results), since the round's
# checker reads them by other rules (early stopping waived, among others)
ENDPOINTS_BENCHMARKS = frozenset().union(*(r.endpoints_results for r in ROUNDS.values()))
MEASURED_DIR = "loadgen_run"  # beside the endpoints files: the logs and records they were derived from
RECORDS_FILE, SESSIONS_SUMMARY = "sessions.jsonl", "sessions_summary.json"
LOADGEN_LOGS = ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_trace.json")
SUMMARY_FILE, ACCURACY_FILE, CONFIG_FILE = "result_summary.json", "accuracy_results.json", "config.yaml"
ACCURACY_DATASET = "bfcl_v4::function_calling"
MAP_LINE = re.compile(r".*(?:mAP=|'Total':)\s*([\d.]+)")  # the checker's ACC_PATTERN["mAP"]


class EndpointsWriteError(MLHarnessError):
    """A run folder lacks what the endpoints files are derived from (exit status 2: the tree, not the host)."""

    exit_code = 2


def is_endpoints_benchmark(benchmark: str | None) -> bool:
    return benchmark in ENDPOINTS_BENCHMARKS


def write_endpoints_result(scen_dir: Path, perf_record: Path | None) -> dict[str, Any]:
    """Turn a scenario folder of ``submission run`` (LoadGen's logs in ``accuracy/`` and ``performance/run_1/``)
    into the endpoints layout, in place; ``perf_record`` is the performance run's record folder (its
    ``sessions.jsonl``). Call it before the accuracy log is truncated: the samples are counted in it. Returns
    the summary written."""
    acc, run = scen_dir / "accuracy", scen_dir / "performance" / "run_1"
    records = _find(RECORDS_FILE, run, perf_record)
    for need in (run / "mlperf_log_detail.txt", acc / "mlperf_log_detail.txt", acc / "accuracy.txt", records):
        if need is None or not need.is_file():
            raise EndpointsWriteError(f"{scen_dir}: {need or RECORDS_FILE} is missing; an endpoints-style result "
                                      f"is derived from the performance run's LoadGen logs and per-turn records "
                                      f"({RECORDS_FILE}) and from the accuracy run's logs and accuracy.txt")
    perf = detail_values(run / "mlperf_log_detail.txt")
    accv = detail_values(acc / "mlperf_log_detail.txt")
    summary = result_summary(records, perf)
    results = accuracy_results(acc, accv)
    config = run_config(perf, accv, _run_meta(perf_record), scen_dir.parent.name)
    measured = scen_dir / "performance" / MEASURED_DIR
    measured.mkdir(parents=True, exist_ok=True)
    for name in (*LOADGEN_LOGS, "mlperf_log_accuracy.json"):
        if (run / name).is_file() and (run / name).stat().st_size:  # LoadGen leaves an empty trace when it is off
            shutil.move(str(run / name), str(measured / name))
    for name in (RECORDS_FILE, SESSIONS_SUMMARY):
        found = _find(name, run, perf_record)
        if found is not None and found.is_file():
            shutil.copy2(found, measured / name)
    shutil.rmtree(run)
    (acc / MEASURED_DIR).mkdir(exist_ok=True)
    for name in LOADGEN_LOGS:
        if (acc / name).is_file() and (acc / name).stat().st_size:
            shutil.move(str(acc / name), str(acc / MEASURED_DIR / name))
        (acc / name).unlink(missing_ok=True)
    (scen_dir / "performance" / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    (acc / ACCURACY_FILE).write_text(json.dumps(results, indent=2) + "\n")
    (scen_dir / CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))
    return summary


def _find(name: str, run: Path, record: Path | None) -> Path | None:
    for folder in (record, run):
        if folder is not None and (folder / name).is_file():
            return folder / name
    return None


def _run_meta(record: Path | None) -> dict[str, Any]:
    meta = read_optional_json(record / "mlharness_run.json", "run record") if record else None
    return meta if isinstance(meta, dict) else {}


def result_summary(records_path: Path, perf: dict[str, Any]) -> dict[str, Any]:
    """``performance/result_summary.json``: the endpoints client's report of the per-turn requests the sessions
    sent (a turn is one of its samples), in nanoseconds, plus LoadGen's own per-session figures."""
    sessions = read_records(records_path)
    turns = [t for s in sessions for t in s.turns]
    done = [t for t in turns if t.error is None and t.done is not None]
    started = [s.started for s in sessions]
    finished = [s.finished for s in sessions if s.finished is not None]
    duration_ns = round((max(finished) - min(started)) * 1e9) if started and finished else None
    out_tokens = [t.completion_tokens for t in done if t.completion_tokens is not None]
    summary: dict[str, Any] = {
        "version": f"mlharness {__version__} (LoadGen {perf.get('loadgen_version')})",
        "git_sha": None,
        "test_started_at": perf.get("test_datetime"),
        "n_samples_issued": len(turns),
        "n_samples_completed": len(done),
        "n_samples_failed": len(turns) - len(done),
        "n_sessions": len(sessions),
        "n_sessions_failed": sum(1 for s in sessions if not s.ok),
        "n_turns_diverged": sum(1 for t in done if t.diverged),
        "duration_ns": duration_ns,
        "state": "complete",
        "complete": all(s.ok for s in sessions),
        "ttft": series([round(t.ttft_s * 1e9) for t in done if t.ttft_s is not None]),
        "tpot": series([round(t.tpot_s * 1e9) for t in done if t.tpot_s is not None]),
        "latency": series([round(t.latency_s * 1e9) for t in done if t.latency_s is not None]),
        "output_sequence_lengths": series(out_tokens),
        "input_sequence_lengths": series([t.prompt_tokens for t in done if t.prompt_tokens is not None]),
        "qps": len(done) / (duration_ns / 1e9) if duration_ns else None,
        "tps": sum(out_tokens) / (duration_ns / 1e9) if duration_ns and out_tokens else None,
    }
    summary["loadgen"] = {key: perf.get(key) for key in (
        "effective_scenario", "result_validity", "result_min_duration_met", "result_min_queries_met",
        "early_stopping_met", "result_query_count", "result_mean_latency_ns", "result_90.00_percentile_latency_ns",
        "result_99.00_percentile_latency_ns", "early_stopping_latency_ss", "qsl_reported_total_count")}
    return summary


def accuracy_results(acc: Path, accv: dict[str, Any]) -> dict[str, Any]:
    """``accuracy/accuracy_results.json``: accuracy.txt's mAP line (the BFCL v4 overall score, the checker's
    ``mAP`` figure) and the number of samples the accuracy log holds (each logged once in accuracy mode)."""
    score = None
    for line in read_log_text(acc / "accuracy.txt", "accuracy.txt").splitlines():
        m = MAP_LINE.match(line.strip())
        if m:
            score = float(m.group(1))
            break
    if score is None:
        raise EndpointsWriteError(f"{acc / 'accuracy.txt'} holds no 'mAP=' line (the BFCL v4 overall score)")
    logged = _logged_samples(acc / "mlperf_log_accuracy.json")
    return {
        "accuracy_scores": [{"dataset_name": ACCURACY_DATASET, "dataset_type": "accuracy", "metric": "mAP",
                             "score": score, "total_samples": logged}],
        "n_samples_issued": accv.get("generated_query_count"),
        "n_samples_completed": logged,
        "n_samples_failed": len(accv.get("errors") or []),
        "test_started_at": accv.get("test_datetime"),
    }


def _logged_samples(path: Path) -> int:
    """The distinct samples of LoadGen's accuracy log (read whole: the package truncates it afterwards)."""
    entries = read_json(path, "LoadGen's accuracy log", ACCURACY_LOG_LIMIT,
                        error=lambda m: EndpointsWriteError(f"{m}; the samples scored are counted in it"))
    if not isinstance(entries, list):
        raise EndpointsWriteError(f"LoadGen's accuracy log {path} is not a JSON list; the samples scored are counted "
                                  "in it")
    return len({e.get("qsl_idx") for e in entries if isinstance(e, dict)})


def run_config(perf: dict[str, Any], accv: dict[str, Any], meta: dict[str, Any], benchmark: str) -> dict[str, Any]:
    """``config.yaml``: where the checker reads the scenario, seeds, minimum duration and sample count of an
    endpoints result (``ENDPOINTS_YAML_FIELD_MAP``), filled from the performance run's detail log."""
    runtime = {"min_duration_ms": perf.get("effective_min_duration_ms"),
               "max_duration_ms": perf.get("effective_max_duration_ms"),
               "n_samples_to_issue": perf.get("effective_min_query_count"),
               "dataloader_random_seed": perf.get("effective_sample_index_rng_seed"),
               "scheduler_random_seed": perf.get("effective_schedule_rng_seed"),
               "qsl_random_seed": perf.get("effective_qsl_rng_seed")}
    config: dict[str, Any] = {
        "name": f"{benchmark} {perf.get('effective_scenario')} (mlharness session replay under LoadGen)",
        "version": f"mlharness {__version__}",
        "type": perf.get("effective_scenario"),
        "model_params": {"name": meta.get("model") or meta.get("manifest", {}).get("name") or benchmark},
        "settings": {"runtime": runtime,
                     "load_pattern": {"type": "loadgen_single_stream",
                                      "target_concurrency": perf.get("effective_max_async_queries")}},
        "datasets": [{"name": "sessions", "type": "performance", "samples": perf.get("qsl_reported_total_count")},
                     {"name": ACCURACY_DATASET, "type": "accuracy", "samples": accv.get("qsl_reported_total_count")}],
    }
    sampling = meta.get("sampling") or meta.get("request_fields")
    if isinstance(sampling, dict):
        config["model_params"].update(sampling)
    return config
