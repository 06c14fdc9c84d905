"""Compliance audits, verified the way the official MLCommons scripts do it (compliance/TEST01, TEST04, TEST05):
the same comparisons, thresholds and output lines ("TEST PASS" / "TEST FAIL..."), written into
``verify_accuracy.txt`` / ``verify_performance.txt`` of the test's directory.

- TEST01: the responses LoadGen sampled during a performance run must equal the accuracy run's responses for
  the same samples (first element, compared in the response dtype of the manifest, which the
  verify_accuracy.txt names; at least one sample must match), and the run's performance must be within 10%
  of the performance run (20% for SingleStream / MultiStream references of at most 0.2 / 1.6 ms).
  A system whose outputs are not bit-exact may instead show that the accuracy of the sampled responses is
  within the benchmark's delta of the accuracy run's on the same samples (baseline_accuracy.txt and
  compliance_accuracy.txt in TEST01/accuracy/).
- TEST04: the same sample issued over and over must not run 10% or more faster than the performance run
  (result caching or coalescing of identical queries); 20% for SingleStream / MultiStream, as the official
  script decides it (see :mod:`compliance_perf`).
- TEST05 (older rounds): LoadGen's alternate seeds must not make the result more than 5% worse.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, MLHarnessError
from mlharness.fileguard import parse_json, read_text_bounded
from mlharness.loadgen.logs import detail_values
from mlharness.submission.compliance_perf import FAST_LIMIT, test01_performance, test04_performance
from mlharness.submission.rules import TEST01_ACC_FALLBACK_FILES
from mlharness.userfiles import ACCURACY_LOG_LIMIT

log = logging.getLogger(__name__)

# the official scripts' --dtype choices, then the other response element types, compared by mlharness only
OFFICIAL_DTYPES = {"byte": np.byte, "float32": np.float32, "int32": np.int32, "int64": np.int64}
DTYPES = {**OFFICIAL_DTYPES, "float16": np.float16, "float64": np.float64, "int16": np.int16}
# a response element type -> the dtype TEST01 compares in (one-byte types are compared as bytes)
ELEMENT_TYPE_DTYPES = {"bytes": "byte", "int8": "byte", "uint8": "byte", "bool": "byte"}


def dtype_for_response(element_type: str | None) -> str:
    """The TEST01 comparison dtype for a manifest's ``response.element_type`` ("byte" when unknown)."""
    if not element_type:
        return "byte"
    dtype = ELEMENT_TYPE_DTYPES.get(element_type, element_type)
    return dtype if dtype in DTYPES else "byte"


def dtype_statement(dtype: str, source: str) -> str:
    """The verify_accuracy.txt line saying which dtype was compared and how to repeat it officially."""
    official = (f"the official run_verification.py needs --dtype {dtype}" if dtype in OFFICIAL_DTYPES else
                "the official run_verification.py has no such --dtype")
    return f"dtype = {dtype} ({source}; the first element of each response is compared; {official})"


# detail-log key of each scenario's result, and the one used when early stopping gave no estimate (for showing
# a short run's result and for TEST05; the TEST01 / TEST04 verdicts use the official rules, without fallback)
RESULT_KEYS = {
    "Offline": ("result_samples_per_second", None),
    "SingleStream": ("early_stopping_latency_ss", "result_90.00_percentile_latency_ns"),
    "MultiStream": ("early_stopping_latency_ms", "result_99.00_percentile_per_query_latency_ns"),
    "Server": ("result_completed_samples_per_sec", None),
}

Scorer = Callable[[Path], Any]  # accuracy log -> AccuracyResult (``.value``, ``.text``)


@dataclass
class Verdict:
    test: str
    check: str  # "accuracy" or "performance"
    passed: bool
    text: str  # what the verify_*.txt file holds
    reason: str = ""  # one line for the terminal: the scores compared and the band allowed (or why none)

    @property
    def label(self) -> str:
        return "PASS" if self.passed else "FAIL"


# ------------------------------------------------------------------------------------------------ accuracy
def verify_test01_accuracy(reference_log: Path, test_log: Path, dtype: str = "byte",
                           source: str = "given") -> Verdict:
    """The official verify_accuracy.py --dtype DTYPE: every sampled response's first element, decoded as
    ``dtype``, equals the accuracy run's. The output is the official one plus a line naming the dtype (and
    ``source``, where it came from) after the first line."""
    if dtype not in DTYPES:
        raise MLHarnessError(f"unknown dtype '{dtype}' for TEST01; expected one of {', '.join(DTYPES)}")
    acc_data = _load_log(reference_log)
    perf_data = _load_log(test_log)
    np_dtype = DTYPES[dtype]
    results: dict[int, str] = {}
    dup_keys = acc_mismatch = matched = perf_mismatch = missing = undecodable = 0
    for sample in acc_data:
        idx, data = sample["qsl_idx"], sample["data"]
        if idx in results:
            dup_keys += 1
            acc_mismatch += results[idx] != data
        else:
            results[idx] = data
    for sample in perf_data:
        idx = sample["qsl_idx"]
        if idx in results:
            matched += 1
            try:
                test = np.frombuffer(bytes.fromhex(sample["data"]), np_dtype)
                ref = np.frombuffer(bytes.fromhex(results[idx]), np_dtype)
            except ValueError:  # a length that is not a multiple of the dtype: the official script crashes
                undecodable += 1
                perf_mismatch += 1
            else:
                if ref.size == 0 or test.size == 0:
                    perf_mismatch += ref.size != test.size
                elif test[0] != ref[0]:
                    perf_mismatch += 1
        else:
            missing += 1
        # as the official script does: a later entry of the same sample is compared with this one
        results[idx] = sample["data"]
    passed = perf_mismatch == 0 and matched > 0
    lines = [
        "Verifying accuracy. This might take a while...",
        dtype_statement(dtype, source),
        "Reading accuracy mode results...",
        "Reading performance mode results...",
        f"num_acc_log_entries = {len(acc_data)}",
        f"num_acc_log_duplicate_keys = {dup_keys}",
        f"num_acc_log_data_mismatch = {acc_mismatch}",
        f"num_perf_log_entries = {len(perf_data)}",
        f"num_perf_log_qsl_idx_match = {matched}",
        f"num_perf_log_data_mismatch = {perf_mismatch}",
        f"num_missing_qsl_idxs = {missing}",
    ]
    if undecodable:
        lines.append(f"num_perf_log_undecodable = {undecodable} (response length not a multiple of {dtype})")
    lines += ["TEST PASS" if passed else "TEST FAIL", ""]
    reason = (f"{perf_mismatch} of {matched} sampled responses differ from the accuracy run's (first element, "
              f"as {dtype}); allowed: none" if matched else "no sampled response matches a sample of the "
              "accuracy run; allowed: at least one")
    return Verdict("TEST01", "accuracy", passed, "\n".join(lines) + "\n", reason)


def verify_test01_fallback(reference_log: Path, test_log: Path, out_dir: Path, scorer: Scorer,
                             delta_percent: float | dict[str, float]) -> tuple[bool, str]:
    """Non-deterministic systems: score the sampled responses and the accuracy run's responses for the same
    samples; the two accuracies must differ by at most ``delta_percent`` percent (a mapping: each figure of the
    scores' details by its own delta, as stable-diffusion-xl's CLIP and FID). Writes baseline_accuracy.txt,
    compliance_accuracy.txt and accuracy.txt into ``out_dir`` (TEST01/accuracy/); returns (passed, summary)."""
    test_entries = _load_log(test_log)
    sampled = {e["qsl_idx"] for e in test_entries}
    baseline_entries = [e for e in _load_log(reference_log) if e["qsl_idx"] in sampled]
    baseline_log = out_dir / ".baseline_accuracy.json"
    baseline_log.write_text(json.dumps(baseline_entries))
    try:
        baseline = scorer(baseline_log)
        compliance = scorer(test_log)
    except MLHarnessError as e:
        return False, f"accuracy fallback: cannot score the sampled responses: {e}"
    finally:
        baseline_log.unlink(missing_ok=True)
    (out_dir / "baseline_accuracy.txt").write_text(baseline.text)
    (out_dir / "compliance_accuracy.txt").write_text(compliance.text)
    (out_dir / "accuracy.txt").write_text(compliance.text)
    if isinstance(delta_percent, dict):
        return _figures_within(baseline, compliance, delta_percent)
    if not baseline.value or not compliance.value:
        return False, (f"accuracy fallback: baseline accuracy {baseline.value}, compliance accuracy "
                       f"{compliance.value}: a zero accuracy cannot be compared: FAIL")
    delta = abs(1 - baseline.value / compliance.value) * 100
    passed = delta <= delta_percent
    return passed, (f"accuracy fallback (non-deterministic outputs): baseline accuracy {baseline.value:.6g}, "
                    f"compliance accuracy {compliance.value:.6g}, delta {delta:.4f}% (allowed "
                    f"{delta_percent:g}%): {'PASS' if passed else 'FAIL'}")


def _figures_within(baseline: Any, compliance: Any, deltas: dict[str, float]) -> tuple[bool, str]:
    """The fallback of a benchmark with several figures: each one of the baseline's and the compliance
    accuracy's details must differ by at most its own delta (percent)."""
    parts, passed = [], True
    for figure, allowed in deltas.items():
        b, c = ((r.details or {}).get(figure) for r in (baseline, compliance))
        if not b or not c:
            return False, (f"accuracy fallback: {figure}: baseline {b}, compliance {c}: a missing or zero figure "
                           f"cannot be compared: FAIL")
        delta = abs(1 - b / c) * 100
        passed = passed and delta <= allowed
        parts.append(f"{figure} baseline {b:.6g}, compliance {c:.6g}, delta {delta:.4f}% (allowed {allowed:g}%)")
    return passed, (f"accuracy fallback (non-deterministic outputs): {'; '.join(parts)}: "
                    f"{'PASS' if passed else 'FAIL'}")


def _load_log(path: Path) -> list[dict[str, Any]]:
    def unreadable(message: str) -> AccuracyError:
        return AccuracyError(f"cannot read: {message} (a truncated log cannot be verified; verify the results tree "
                             "that holds the full logs)")

    text = read_text_bounded(Path(path), "accuracy log", ACCURACY_LOG_LIMIT, error=unreadable)
    entries = parse_json(text or "[]", f"accuracy log {path}", error=unreadable)
    if not isinstance(entries, list):
        raise AccuracyError(f"{path} is not a LoadGen accuracy log (a JSON list)")
    return entries


# --------------------------------------------------------------------------------------------- performance
def result_score(detail_path: Path) -> tuple[str, float, bool, dict[str, Any], str | None]:
    """(scenario, score, valid, detail values, note) of a run's mlperf_log_detail.txt."""
    return score_of(detail_values(detail_path), detail_path)


def score_of(values: dict[str, Any], detail_path: Path) -> tuple[str, float, bool, dict[str, Any], str | None]:
    """:func:`result_score` of detail values already read (``detail_path`` names the log in messages)."""
    scenario = values.get("effective_scenario")
    if scenario not in RESULT_KEYS:
        raise MLHarnessError(f"{detail_path}: no known effective_scenario ({scenario!r})")
    key, fallback = RESULT_KEYS[scenario]
    note = None
    score = values.get(key)
    if (score is None or float(score) <= 0) and fallback is not None:
        # a short run may end before early stopping can estimate anything; compare the plain percentile then
        note = f"{detail_path.parent.name}: no early-stopping estimate ({key}); using {fallback}"
        score = values.get(fallback)
    if score is None:
        raise MLHarnessError(f"{detail_path}: the result '{key}' is missing")
    return scenario, float(score), values.get("result_validity") == "VALID", values, note


def verify_performance(reference_detail: Path, test_detail: Path, test: str) -> Verdict:
    """TEST01 and TEST04 exactly as the official verify_performance.py scripts (:mod:`compliance_perf`: TEST01
    compares the detail logs, TEST04 the summaries beside them); TEST05 (older rounds): not more than 5% worse."""
    if test == "TEST01":
        passed, lines, reason = test01_performance(reference_detail, test_detail)
    elif test == "TEST04":
        passed, lines, reason = test04_performance(Path(reference_detail).with_name("mlperf_log_summary.txt"),
                                                   Path(test_detail).with_name("mlperf_log_summary.txt"))
    elif test == "TEST05":
        passed, lines = _test05_performance(reference_detail, test_detail)
        reason = lines[-1]
    else:
        raise MLHarnessError(f"unknown compliance test '{test}'")
    return Verdict(test, "performance", passed, "\n".join(lines) + "\n", reason)


def _test05_performance(reference_detail: Path, test_detail: Path) -> tuple[bool, list[str]]:
    lines = ["Verifying performance."]
    ref_scen, ref, ref_valid, _, ref_note = result_score(reference_detail)
    test_scen, score, test_valid, _, test_note = result_score(test_detail)
    lines += [n for n in (ref_note, test_note) if n]
    if not ref_valid or not test_valid:
        return False, [*lines, f"TEST FAIL: Invalid results in {reference_detail if not ref_valid else test_detail}"]
    if test_scen != ref_scen:
        return False, [*lines, "TEST FAIL: Test and reference scenarios do not match!"]
    lines += [f"Reference score = {ref}", f"Test score = {score}"]
    latency = ref_scen in FAST_LIMIT
    threshold = 0.20 if latency and ref <= FAST_LIMIT[ref_scen] else 0.05
    passed = score < ref * (1 + threshold) if latency else score > ref * (1 - threshold)
    lines.append(f"mlharness: {ref_scen}; the test may not be more than {threshold:.0%} worse than the reference")
    return passed, [*lines, "TEST PASS" if passed else "TEST FAIL: Test score invalid"]


# ------------------------------------------------------------------------------------------------ scenario
def verify_scenario(scenario_dir: Path, tests: list[str] | None = None, dtype: str = "byte",
                    scorer: Scorer | None = None, delta_percent: float | dict[str, float] = 1.0,
                    dtype_source: str = "given", eos_ids: set[int] | None = None,
                    test07_scorer: Scorer | None = None) -> list[Verdict]:
    """Verify the compliance directories of one <benchmark>/<scenario> directory and (re)write their verify
    files. ``tests`` defaults to every TEST0x directory present; TEST01 compares responses in ``dtype``
    (``dtype_source`` says where it came from, in verify_accuracy.txt)."""
    scenario_dir = Path(scenario_dir)
    found = sorted(p.name for p in scenario_dir.glob("TEST0*") if p.is_dir())
    verdicts: list[Verdict] = []
    reference_detail = scenario_dir / "performance" / "run_1" / "mlperf_log_detail.txt"
    for test in tests or found:
        test_dir = scenario_dir / test
        if not test_dir.is_dir():
            raise MLHarnessError(f"{test_dir} does not exist: run the {test} audit first")
        if test in ("TEST07", "TEST09"):  # gpt-oss-120b: every sample of a performance run logged
            from mlharness.submission.test07 import verify_full_log

            passed, text, reason = verify_full_log(scenario_dir, test, test07_scorer)
            verdicts.append(Verdict(test, "accuracy" if test == "TEST07" else "output length", passed, text, reason))
            continue
        if test == "TEST08":  # dlrm-v3: sampled responses matched on (ts_idx, query_idx), NE within 0.1%
            verdicts.append(verify_test08(scenario_dir / "accuracy" / "mlperf_log_accuracy.json",
                                          test_dir / "accuracy" / "mlperf_log_accuracy.json", test_dir))
            continue
        if test == "TEST06":  # LLM output consistency: the sampled token streams, no performance comparison
            from mlharness.submission.test06 import verify

            r = verify(test_dir / "accuracy", scenario_dir, scenario_dir.name, eos_ids or set(), "int32")
            text = r.text()
            verdicts.append(Verdict("TEST06", "accuracy", r.passed, text, text.strip().splitlines()[-1]))
            continue
        test_detail = test_dir / "performance" / "run_1" / "mlperf_log_detail.txt"
        perf = verify_performance(reference_detail, test_detail, test)
        (test_dir / "verify_performance.txt").write_text(perf.text)
        if test == "TEST01":
            verdicts.append(_verify_test01_accuracy(scenario_dir, test_dir, dtype, scorer, delta_percent,
                                                    dtype_source))
        verdicts.append(perf)
    return verdicts


def verify_test08(reference_log: Path, test_log: Path, test_dir: Path) -> Verdict:
    """TEST08 as ``compliance/TEST08/run_verification.py`` prints it, kept as ``TEST08/verify_accuracy.txt`` (the
    checker looks for its ``TEST PASS`` line); the matching is :func:`mlharness.tasks.dlrm_v3.test08.verify`'s."""
    from mlharness.tasks.dlrm_v3.test08 import verify

    for log in (reference_log, test_log):
        if not log.is_file():
            raise MLHarnessError(f"TEST08 needs {log}: run the accuracy run and the TEST08 audit first")
    passed, body = verify(reference_log, test_log)
    text = "Verifying accuracy. This might take a while...\n" + body + "TEST08 verification complete\n"
    (test_dir / "verify_accuracy.txt").write_text(text)
    counts = ", ".join(line for line in body.splitlines() if line.startswith(("num_matched", "num_unmatched",
                                                                              "num_ne_mismatch")))
    return Verdict("TEST08", "accuracy", passed, text, counts)


def _verify_test01_accuracy(scenario_dir: Path, test_dir: Path, dtype: str, scorer: Scorer | None,
                            delta_percent: float | dict[str, float], dtype_source: str) -> Verdict:
    reference_log = scenario_dir / "accuracy" / "mlperf_log_accuracy.json"
    acc_dir = test_dir / "accuracy"
    test_log = acc_dir / "mlperf_log_accuracy.json"
    verdict = verify_test01_accuracy(reference_log, test_log, dtype, dtype_source)
    for name in TEST01_ACC_FALLBACK_FILES:  # results of an earlier fallback no longer apply
        (acc_dir / name).unlink(missing_ok=True)
    if not verdict.passed:
        if scorer is None:
            note = "accuracy fallback: not available (the model declares no accuracy metric)"
        else:
            fallback_passed, note = verify_test01_fallback(reference_log, test_log, acc_dir, scorer,
                                                             delta_percent)
            verdict.passed = fallback_passed
        verdict.text += note + "\n"
        verdict.reason += f"; {note}"
    (test_dir / "verify_accuracy.txt").write_text(verdict.text)
    return verdict
