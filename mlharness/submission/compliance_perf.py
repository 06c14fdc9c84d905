"""The performance comparisons of the compliance audits, rule for rule as the official scripts make them
(``compliance/TEST01/verify_performance.py`` and ``compliance/TEST04/verify_performance.py``), with the same
output lines. The two scripts do not read the same files nor compare the same quantity:

- TEST01 reads the *detail* logs (the first event of each key, as ``MLPerfLog`` does) and compares the
  scenario's result field as it is: samples per second (Offline, Server) or the early-stopping latency
  estimate in ns (SingleStream, MultiStream). The test must lie within 10% of the reference either way; 20%
  when the reference latency is at most 200,000 ns (SingleStream) or 1,600,000 ns (MultiStream). A log with
  an error event, or without the result field, makes the official script stop with an exception (no
  ``TEST PASS``): here it is a ``TEST FAIL`` saying why.
- TEST04 reads the *summaries*; a latency becomes queries per second (1e9 / the early-stopping estimate)
  and the 200,000 / 1,600,000 limits are then compared with that rate, so every SingleStream run slower
  than 5 us and every MultiStream run slower than 0.625 us gets the 20% tolerance. The test may not be
  more than the tolerance faster: ``test < reference * (1 + tolerance)``. Its Server target-latency check
  never fires (its pattern ``target_latency (ns)`` is a regular expression that no summary line matches).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mlharness.loadgen.logs import read_detail
from mlharness.userfiles import read_log_text

TEST01_RESULT_FIELD = {
    "Offline": "result_samples_per_second",
    "SingleStream": "early_stopping_latency_ss",
    "MultiStream": "early_stopping_latency_ms",
    "Server": "result_completed_samples_per_sec",
}
TEST04_ESTIMATE = {
    "SingleStream": re.compile(r".*Early stopping (90th|90.0th|99.9th) percentile estimate"),
    "MultiStream": re.compile(r".*Early stopping (99th|99.0th) percentile estimate"),
}
# both scripts: at or below these reference scores the tolerance is 20% instead of 10%
FAST_LIMIT = {"SingleStream": 200_000, "MultiStream": 1_600_000}


class _Stop(Exception):
    """Where the official script exits (sys.exit) or dies with an exception: the verdict is a failure."""


# ------------------------------------------------------------------------------------------------- TEST01
def _mlperf_log(path: Path) -> tuple[dict[str, Any], int]:
    """(first value of each key, number of errors) of a detail log, as the official MLPerfLog reads it."""
    if not Path(path).is_file():
        raise _Stop(f"TEST FAIL: cannot read {path} (the official script stops here)")
    values: dict[str, Any] = {}
    errors = 0
    for ev in read_detail(Path(path)):
        key = ev.get("key")
        if key is None:
            continue
        values.setdefault(key, ev.get("value"))
        errors += bool(ev.get("metadata", {}).get("is_error"))
    if "num_errors" in values:
        errors = int(values["num_errors"] or 0)
    return values, errors


def _test01_result(path: Path) -> tuple[str, float, Any]:
    values, errors = _mlperf_log(path)
    scenario = values.get("effective_scenario")
    if scenario not in TEST01_RESULT_FIELD:
        raise _Stop(f"TEST FAIL: {path} has no known effective_scenario ({scenario!r}; the official script stops "
                    f"with an exception here)")
    key = TEST01_RESULT_FIELD[scenario]
    try:
        score = float(values.get(key))  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        raise _Stop(f"TEST FAIL: {path} has no usable '{key}' ({values.get(key)!r}; the official script stops "
                    f"with an exception here)") from e
    if values.get("result_validity") != "VALID":
        raise _Stop(f"TEST FAIL: Invalid results in {path}")
    if errors:
        raise _Stop(f"TEST FAIL: {errors} ERROR reported in {path} (the official script stops with an "
                    f"exception on a log with errors)")
    return scenario, score, values.get("effective_target_latency_ns") if scenario == "Server" else None


def band(ref: float, score: float, threshold: float, unit: str, two_sided: bool) -> str:
    """One line for the terminal: the two scores, how far apart they are, and the band the rule allows."""
    change = (score / ref - 1) * 100 if ref else float("inf")
    if two_sided:
        low, high = ref * (1 - threshold), ref * (1 + threshold)
        allowed = f"within {threshold:.0%} of the reference: {low:,.6g} to {high:,.6g}"
    else:
        allowed = f"less than {threshold:.0%} above the reference: below {ref * (1 + threshold):,.6g}"
    return f"test {score:,.6g} vs reference {ref:,.6g} {unit} ({change:+.1f}%); allowed: {allowed}"


def test01_performance(reference_detail: Path, test_detail: Path) -> tuple[bool, list[str], str]:
    """(passed, output lines, the scores and band in one line) of compliance/TEST01/verify_performance.py
    -r REFERENCE -t TEST."""
    lines = ["Verifying performance."]
    try:
        ref_scenario, ref, ref_latency = _test01_result(reference_detail)
        test_scenario, score, test_latency = _test01_result(test_detail)
        if test_scenario != ref_scenario:
            raise _Stop("TEST FAIL: Test and reference scenarios do not match!")
        if ref_scenario == "Server" and test_latency != ref_latency:
            raise _Stop("TEST FAIL: Server target latency mismatch")
    except _Stop as stop:
        return False, [*lines, str(stop)], str(stop)
    lines += [f"Reference score = {ref}", f"Test score = {score}"]
    threshold = 0.20 if ref_scenario in FAST_LIMIT and ref <= FAST_LIMIT[ref_scenario] else 0.10
    passed = ref * (1 - threshold) <= score <= ref * (1 + threshold)
    unit = "ns (early-stopping latency estimate)" if ref_scenario in FAST_LIMIT else "samples per second"
    lines.append(f"mlharness: {ref_scenario}, detail logs, scores in {unit}; the test score must lie within "
                 f"{threshold:.0%} of the reference score")
    short = "ns" if ref_scenario in FAST_LIMIT else "samples/s"
    return passed, [*lines, "TEST PASS" if passed else "TEST FAIL: Test score invalid"], \
        band(ref, score, threshold, short, two_sided=True)


# ------------------------------------------------------------------------------------------------- TEST04
def _test04_summary(path: Path, who: str, lines: list[str], ref_target_latency: Any = None) -> tuple[str, Any, Any]:
    """(scenario, score, target latency) of a summary, read line by line as the official script does."""
    mode, score, target_latency = "", 0, None
    text = read_log_text(path, "summary", error=lambda m: _Stop(f"TEST FAIL: {m} (the official script stops here)"))
    for line in text.splitlines(keepends=True):  # line by line, as the official script reads it
        if re.match("Scenario", line):
            mode = line.split(": ", 1)[1].strip()
            continue
        if mode in TEST04_ESTIMATE:
            if TEST04_ESTIMATE[mode].match(line):
                try:
                    score = 1e9 / float(line.split(": ", 1)[1].strip())
                except (ValueError, ZeroDivisionError) as e:
                    raise _Stop(f"TEST FAIL: {path}: unusable early-stopping estimate ({line.strip()}; the "
                                f"official script stops with an exception here)") from e
                continue
        if mode == "Server":
            if re.match("Completed samples per second", line):
                score = line.split(": ", 1)[1].strip()
                continue
            if re.match("target_latency (ns)", line):  # a regex: matches "target_latency ns", never LoadGen's
                target_latency = line.split(": ", 1)[1].strip()
                if who == "test" and target_latency != ref_target_latency:
                    raise _Stop("TEST FAIL: Server target latency mismatch")
                continue
        if mode == "Offline":
            if re.match("Samples per second", line):
                score = line.split(": ", 1)[1].strip()
                continue
        if re.match("Result is", line):
            if line.split(": ", 1)[1].strip() == "INVALID":
                raise _Stop(f"TEST FAIL: {who.capitalize()} results are invalid")
        if re.match("\\d+ ERROR", line):
            lines.append(f"WARNING: {line.split(' ', 1)[0].strip()} ERROR reported in {who} results")
    return mode, score, target_latency


def test04_performance(reference_summary: Path, test_summary: Path) -> tuple[bool, list[str], str]:
    """(passed, output lines, the scores and band in one line) of compliance/TEST04/verify_performance.py
    -r REFERENCE -t TEST."""
    lines = ["Verifying performance."]
    try:
        ref_mode, ref, ref_latency = _test04_summary(reference_summary, "reference", lines)
        test_mode, score, _ = _test04_summary(test_summary, "test", lines, ref_latency)
        if test_mode != ref_mode:
            raise _Stop("Test and reference scenarios do not match!")
        lines += [f"reference score = {ref}", f"test score = {score}"]
        try:
            ref_value, test_value = float(ref), float(score)
        except ValueError as e:
            raise _Stop(f"TEST FAIL: a score is not a number ({ref!r}, {score!r}; the official script stops "
                        f"with an exception here)") from e
    except _Stop as stop:
        return False, [*lines, str(stop)], str(stop)
    threshold = 0.20 if ref_mode in FAST_LIMIT and ref_value <= FAST_LIMIT[ref_mode] else 0.10
    passed = test_value < ref_value * (1 + threshold)
    unit = "queries per second (1e9 / early-stopping latency estimate)" if ref_mode in FAST_LIMIT else \
        "samples per second"
    lines.append(f"mlharness: {ref_mode or 'no scenario'}, summaries, scores in {unit}; the test may not be "
                 f"{threshold:.0%} or more faster than the reference")
    short = "queries/s" if ref_mode in FAST_LIMIT else "samples/s"
    return passed, [*lines, "TEST PASS" if passed else "TEST FAIL: Test score invalid"], \
        band(ref_value, test_value, threshold, short, two_sided=False)
