"""The checker's rules for one <system>/<benchmark>/<scenario> directory: its files, the accuracy run, the
performance run and the compliance audits (see :mod:`mlharness.submission.checker`)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.fileguard import describe_kind, read_text_bounded
from mlharness.loadgen.logs import detail_values
from mlharness.loadgen.settings import embedded_seeds
from mlharness.rounds import NO_MIN_DURATION, round_of_seeds, wrong_seeds
from mlharness.submission import checker_tables
from mlharness.submission.checker_accuracy import accuracy_value, check_accuracy_value
from mlharness.submission.checker_endpoints import check_endpoints_scenario, is_endpoints_layout
from mlharness.submission.compliance import score_of
from mlharness.submission.endpoints import ACCURACY_FILE, CONFIG_FILE, SUMMARY_FILE, is_endpoints_benchmark
from mlharness.submission.findings import Findings
from mlharness.submission.llm_rules import conf_model_for, is_llm, loadgen_scenario
from mlharness.submission.rules import (
    ACC_PATTERNS,
    ACCURACY_EXTRA_FILES,
    CHECKER_PERFORMANCE_SAMPLE_COUNT,
    COMPLIANCE_TESTS,
    EARLY_STOPPING_SCENARIOS,
    HASH_PATTERN,
    MAX_ACCURACY_LOG_SIZE,
    MEASUREMENTS_FIELDS,
    MIN_DURATION_MS,
    OFFLINE_MIN_SPQ,
    OPTIONAL_LOG_FILES,
    REQUIRED_ACC_FILES,
    REQUIRED_PERF_FILES,
    SCENARIO_FILES,
    SCENARIOS,
    TEST01_ACC_FALLBACK_FILES,
    TEST01_FIGURE_DELTAS,
    Benchmark,
    conf_minimums,
)
from mlharness.userfiles import LOG_LIMIT, read_log_text

SCENARIO_ENTRIES = {"accuracy", "performance", *COMPLIANCE_TESTS, *SCENARIO_FILES}
TEST_ENTRIES = {"TEST01": {"accuracy", "performance", "verify_accuracy.txt", "verify_performance.txt"},
                "TEST04": {"performance", "verify_performance.txt"},
                "TEST05": {"performance", "verify_performance.txt"},
                "TEST06": {"accuracy", "verify_accuracy.txt"},
                "TEST07": {"accuracy", "performance", "verify_accuracy.txt"},
                "TEST08": {"accuracy", "performance", "verify_accuracy.txt"},  # dlrm-v3
                "TEST09": {"accuracy", "performance", "verify_output_len.txt"}}
# any of these in a scenario without LoadGen detail logs: an endpoints-style result (submission/endpoints.py)
ENDPOINTS_FILES = ((CONFIG_FILE,), ("performance", SUMMARY_FILE), ("accuracy", ACCURACY_FILE))
OPEN_MODEL = "mlharness-open-model"  # a name mlperf.conf does not know: LoadGen's '*' settings apply
# LoadGen logs this for audit runs (the audit config is a second conf file); the official checker tolerates it there
AUDIT_TOLERATED_ERROR = "Multiple conf files are used"


def check_scenario(c: Findings, division: str, info: Benchmark | None, scen_dir: Path) -> None:
    scenario = scen_dir.name
    if scenario not in SCENARIOS:
        c.error(scen_dir, f"'{scenario}' is not a scenario ({', '.join(SCENARIOS)})")
        return
    if is_endpoints_layout(scen_dir) and (is_endpoints_benchmark(info.name if info else None)
                                          or any(scen_dir.joinpath(*p).exists() for p in ENDPOINTS_FILES)):
        check_endpoints_scenario(c, division, info, scen_dir)  # read as the official loader reads it
        return
    for entry in sorted(scen_dir.iterdir()):
        if entry.name not in SCENARIO_ENTRIES:
            c.error(entry, "extra file: the checker accepts only accuracy/, performance/, TEST0x/, "
                           "measurements.json, user.conf and README.md here")
    for name in SCENARIO_FILES:
        if not (scen_dir / name).is_file():
            c.error(scen_dir / name, "missing")
    if (scen_dir / "measurements.json").is_file():
        data = c._json(scen_dir / "measurements.json")
        for key in MEASUREMENTS_FIELDS:
            if not str(data.get(key, "")).strip():
                c.error(scen_dir / "measurements.json", f"field '{key}' is missing or empty")
    check_accuracy(c, division, info, scen_dir / "accuracy")
    perf = scen_dir / "performance"
    if not perf.is_dir():
        c.error(perf, "missing")
    else:
        for entry in sorted(perf.iterdir()):
            if entry.name != "run_1":
                c.error(entry, "extra entry: a performance directory holds run_1 only")
        c.row.result = check_perf_run(c, division, info, scenario, perf / "run_1", None)
    check_compliance(c, division, info, scenario, scen_dir)


def check_files(c: Findings, folder: Path, required: tuple[str, ...] | set[str],
                optional: tuple[str, ...] = ()) -> bool:
    if not folder.is_dir():
        c.error(folder, "missing")
        return False
    present = set()
    for path in folder.iterdir():
        odd = odd_kind(path)
        if odd:  # a FIFO would block the reader for ever, a device never ends: named, and counted as missing
            c.error(path, f"is {odd}, not a regular file: a submission holds regular files and folders only")
        else:
            present.add(path.name)
    for name in sorted(set(required) - present):
        c.error(folder / name, "missing")
    for name in sorted(present - set(required) - set(optional)):
        c.error(folder / name, "extra file: not allowed here")
    return not set(required) - present


def odd_kind(path: Path) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (symbolic links followed), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken symbolic link" if path.is_symlink() else "unreadable"
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else describe_kind(mode)


def check_accuracy(c: Findings, division: str, info: Benchmark | None, acc: Path) -> None:
    extra = ACCURACY_EXTRA_FILES.get(info.name if info else "", {}).get(c.rules.round.name)
    if extra is not None:
        check_extra_files(c, acc, *extra)
    if not check_files(c, acc, REQUIRED_ACC_FILES, ("mlperf_log_trace.json", *(extra[:1] if extra else ()))):
        if not (acc / "accuracy.txt").is_file():
            return
    log = acc / "mlperf_log_accuracy.json"
    if log.is_file() and log.stat().st_size > MAX_ACCURACY_LOG_SIZE:
        c.error(log, f"is {log.stat().st_size} bytes: not truncated (at most {MAX_ACCURACY_LOG_SIZE} bytes; "
                     f"mlharness submission package truncates it)")
    lines = read_log_text(acc / "accuracy.txt", "accuracy.txt").splitlines() if (acc / "accuracy.txt").is_file() \
        else []
    if not any(re.match(HASH_PATTERN, line.strip()) for line in lines):
        c.error(acc / "accuracy.txt", "has no 'hash=' line: the accuracy log was not truncated the official way")
    if info is not None and is_llm(info.name):
        from mlharness.submission.checker_llm import check_llm_accuracy

        check_llm_accuracy(c, division, info, acc, lines)
    else:
        check_accuracy_value(c, division, info, acc, lines)
    if (acc / "mlperf_log_detail.txt").is_file():
        values = detail_values(acc / "mlperf_log_detail.txt")
        loadgen_errors(c, acc / "mlperf_log_detail.txt", values, audit=False)
        if values.get("effective_test_mode") != "AccuracyOnly":
            c.error(acc, f"was run in {values.get('effective_test_mode')} mode, not AccuracyOnly")
        covered = values.get("effective_accuracy_sample_count", values.get("qsl_reported_total_count"))
        if info is not None and covered != info.dataset_size:
            c.development(acc, f"the accuracy run covers {covered} samples; {info.name} needs the whole dataset "
                               f"({info.dataset_size})")


def check_extra_files(c: Findings, acc: Path, folder: str, ids: tuple[str, ...]) -> None:
    """The checker's extra_files_check (``check_extra_files`` of its utils.py): ``acc/folder`` holds a file
    named ``<id>.<anything>`` for each id; its message lists the missing ones as ``.mp4`` and then, though it
    does not fail for it, ``captions.txt`` where no ``captions.*`` is there. A missing file is a development
    finding: a development run scores part of the prompts, and the submitted run covers them all."""
    if not (acc / folder).is_dir():
        missing = [str(acc / folder)]
    else:
        names = {p.name.split(".")[0] for p in (acc / folder).iterdir() if p.is_file()}
        missing = [f"{acc / folder / i}.mp4" for i in ids if i not in names]
        if missing and "captions" not in names:
            missing.append(str(acc / folder / "captions.txt"))
    if missing:
        c.development(acc, f"expected to have the following extra files ({missing})")


def loadgen_errors(c: Findings, detail: Path, values: dict[str, Any], audit: bool) -> None:
    errors = [e for e in values["errors"] if not (audit and AUDIT_TOLERATED_ERROR in str(e.get("value")))]
    if errors:
        c.error(detail, "LoadGen logged errors: " + "; ".join(f"{e['key']}: {e['value']}" for e in errors))


def check_perf_run(c: Findings, division: str, info: Benchmark | None, scenario: str, run: Path,
                   test: str | None) -> str:
    """The rules of one performance run (the submission run, or an audit's); returns its result for the table."""
    optional = OPTIONAL_LOG_FILES
    if not check_files(c, run, REQUIRED_PERF_FILES, optional):
        return "-"
    detail = run / "mlperf_log_detail.txt"
    values = detail_values(detail)
    if values.get("effective_scenario") != loadgen_scenario(scenario):
        c.error(detail, f"is a {values.get('effective_scenario')} run in the {scenario} directory")
        return "-"
    if values.get("result_validity") != "VALID":
        c.error(detail, f"the result is {values.get('result_validity')}: {values.get('result_invalid_reason', '')}"
                .rstrip(": "))
    loadgen_errors(c, detail, values, audit=test is not None)
    r = c.rules.round
    found = {k.removeprefix("effective_"): v for k, v in values.items() if k.endswith("_rng_seed")}
    other = round_of_seeds(found) if test != "TEST05" else None
    made_for = f"; the run was made for round {other}" if other and other != r.name else ""
    for problem in wrong_seeds(r, found, test05=test == "TEST05", embedded_test05=embedded_seeds()):
        c.error(detail, f"{problem} (the {'TEST05 seeds' if test == 'TEST05' else 'seeds'} of round {r.name}"
                        f"{made_for})")
    mins = conf_minimums(conf_model_for(info.model, scenario) if info else OPEN_MODEL, loadgen_scenario(scenario))
    duration = values.get("effective_min_duration_ms", 0)
    if duration < MIN_DURATION_MS and not (info and info.name in NO_MIN_DURATION):  # an error in every division
        c.development(detail, f"Test duration less than 600s in user config. expected={MIN_DURATION_MS}, "
                              f"found={duration} (min_duration is {duration} ms; the official checker rejects "
                              f"runs shorter than {MIN_DURATION_MS} ms in every division, open included)")
    # the checker's min-queries row of the round, held against the stated count only where early stopping does not
    # judge the run (checker_tables.min_queries: Offline)
    least_count = checker_tables.min_queries(r.name, info.name, scenario) if info is not None else None
    if least_count and values.get("effective_min_query_count", 0) < least_count:  # the official checker's words
        c.development(detail, f"Required minimum Query Count not met by user config, Expected={least_count}, "
                              f"Found={values.get('effective_min_query_count')}")
    least = OFFLINE_MIN_SPQ.get(info.name) if info is not None and division == "closed" else None
    if least and scenario == "Offline" and test in (None, "TEST01", "TEST04"):
        found = values.get("effective_samples_per_query")
        if not isinstance(found, int) or found < least:  # the official checker's words
            c.development(detail, f"Required minimum samples per query not met by user config, Expected={least}, "
                                  f"Found={found}")
    needed = CHECKER_PERFORMANCE_SAMPLE_COUNT.get(info.name if info else "") or mins["performance_sample_count"] \
        or (info.dataset_size if info else 0)
    if values.get("effective_performance_sample_count", 0) < needed:
        c.development(detail, f"performance_sample_count is {values.get('effective_performance_sample_count')}; "
                              f"at least {needed} required")
    if loadgen_scenario(scenario) in EARLY_STOPPING_SCENARIOS and values.get("early_stopping_met") is False:
        c.development(detail, "LoadGen's early-stopping condition was not met (too few queries)")
    bound = c.rules.server_latency_ns.get(info.name) if info and loadgen_scenario(scenario) == "Server" else None
    if bound and values.get("effective_target_latency_ns", 0) > bound:
        c.error(detail, f"target latency {values['effective_target_latency_ns']} ns exceeds the {bound} ns bound")
    if mins["sample_concatenate_permutation"] and not values.get("effective_sample_concatenate_permutation"):
        c.error(detail, "the benchmark requires equal-issue mode (sample_concatenate_permutation)")
    if info is not None and is_llm(info.name):
        from mlharness.submission.checker_llm import check_llm_run

        return check_llm_run(c, info, scenario, values, detail)
    try:
        scen, score, _, _, _ = score_of(values, detail)  # the values read above: the log is parsed once
    except MLHarnessError:
        return "-"
    return f"{score / 1e6:,.3f} ms" if scen in ("SingleStream", "MultiStream") else f"{score:,.1f} samples/s"


def check_compliance(c: Findings, division: str, info: Benchmark | None, scenario: str, scen_dir: Path) -> None:
    required = info.compliance if info is not None and division != "open" else ()
    for test in required:
        if not (scen_dir / test).is_dir():
            c.error(scen_dir / test, f"missing: {info.name if info else ''} results need the {test} audit")
    labels = []
    for test in COMPLIANCE_TESTS:
        test_dir = scen_dir / test
        if test_dir.is_dir():
            with c.advisory(division == "open"):  # open results need no audits: what they have is advice
                labels.append(_check_test_dir(c, division, info, scenario, test, test_dir))
    c.row.compliance = ", ".join(labels) or "-"


def _check_test_dir(c: Findings, division: str, info: Benchmark | None, scenario: str, test: str,
                    test_dir: Path) -> str:
    for entry in sorted(test_dir.iterdir()):
        if entry.name not in TEST_ENTRIES[test]:
            c.error(entry, f"extra file: not part of a {test} directory")
    if test == "TEST06":
        from mlharness.submission.checker_llm import check_test06

        return f"TEST06 {'PASS' if check_test06(c, test_dir) else 'FAIL'}"
    if test in ("TEST07", "TEST08", "TEST09"):  # the official checker reads only the verify file's TEST PASS
        verify = test_dir / ("verify_output_len.txt" if test == "TEST09" else "verify_accuracy.txt")
        check_files(c, test_dir / "accuracy", ("mlperf_log_accuracy.json",))
        passed = _verify_file_passes(c, verify)
        if not passed:
            c.error(test_dir, f"{test} did not pass ({verify.name} has no TEST PASS)")
        return f"{test} {'PASS' if passed else 'FAIL'}"
    perf = test_dir / "performance"
    if perf.is_dir():
        for entry in sorted(perf.iterdir()):
            if entry.name != "run_1":
                c.error(entry, "extra entry: a performance directory holds run_1 only")
    check_perf_run(c, division, info, scenario, perf / "run_1", test)
    perf_passed = _verify_file_passes(c, test_dir / "verify_performance.txt")
    passed = True
    if test == "TEST01":
        check_files(c, test_dir / "accuracy", ("mlperf_log_accuracy.json",), TEST01_ACC_FALLBACK_FILES)
        passed = _test01_accuracy_passes(c, info, test_dir)
    failed = [check for check, ok in (("accuracy", passed), ("performance", perf_passed)) if not ok]
    finding = development_finding(test, failed, test_dir)
    if finding:
        c.development(test_dir / "verify_performance.txt", finding)
    elif failed:
        c.error(test_dir, f"{test} did not pass")
    return f"{test} {'PASS' if not failed else 'FAIL (development)' if finding else 'FAIL'}"


PERFORMANCE_AUDITS = ("TEST01", "TEST04", "TEST05")  # the audits that compare the rate with the performance run's


def development_finding(test: str, failed: list[str], test_dir: Path) -> str | None:
    """The finding a failed audit is when its only failed check is the performance comparison and the audit's
    run is shorter than the official duration: figures of runs that short vary on a shared host by more than the
    audit's band, so this is a development finding (the tree cannot be submitted anyway, and the verdict in the
    tree stays the official one). None when nothing failed or the failure is a real one (the accuracy
    comparison, or runs of the official length). ``submission run`` asks the same question, so that it fails
    exactly where ``check --allow-development`` does."""
    if list(failed) != ["performance"] or test not in PERFORMANCE_AUDITS:
        return None
    detail = test_dir / "performance" / "run_1" / "mlperf_log_detail.txt"
    try:
        duration = int(detail_values(detail).get("effective_min_duration_ms", 0))
    except (OSError, MLHarnessError, TypeError, ValueError):  # an unreadable log is reported by check_perf_run
        return None
    if duration >= MIN_DURATION_MS:
        return None
    return (f"{test} did not pass its performance comparison, between runs of {duration} ms: figures of runs that "
            f"short vary by more than the band; it is meant for runs of at least {MIN_DURATION_MS} ms")


def _verify_file_passes(c: Findings, path: Path) -> bool:
    if not path.is_file():
        c.error(path, "missing")
        return False
    return any("TEST PASS" in line for line in read_log_text(path, "verification").splitlines())


def _test01_accuracy_passes(c: Findings, info: Benchmark | None, test_dir: Path) -> bool:
    path = test_dir / "verify_accuracy.txt"
    if not path.is_file():
        c.error(path, "missing")
        return False
    if "TEST PASS" in [line.strip() for line in read_log_text(path, "verification").splitlines()]:
        return True
    acc = test_dir / "accuracy"  # the non-deterministic fallback: sampled accuracy within the benchmark's delta
    files = [acc / "baseline_accuracy.txt", acc / "compliance_accuracy.txt"]
    if not all(f.is_file() for f in files):
        return False
    texts = [read_text_bounded(f, "accuracy figures", LOG_LIMIT).splitlines() for f in files]
    if info and info.name in TEST01_FIGURE_DELTAS:  # each figure within its own delta (stable-diffusion-xl)
        for figure, allowed in TEST01_FIGURE_DELTAS[info.name].items():
            (baseline, _), (compliance, _) = (accuracy_value(lines, [figure]) for lines in texts)
            if not baseline or not compliance or abs(1 - baseline / compliance) * 100 > allowed:
                return False
        return True
    kinds = [info.accuracy_kind] if info else list(ACC_PATTERNS)
    (baseline, _), (compliance, _) = (accuracy_value(lines, kinds) for lines in texts)
    if not baseline or not compliance:
        return False
    allowed = info.test01_delta_percent if info else 1.0
    return abs(1 - baseline / compliance) * 100 <= allowed

