"""TEST07 (gpt-oss-120b): accuracy measured inside a performance-mode run that logs every sample, verified as the
official ``compliance/TEST07/run_verification.py`` does.

The audit config (``mlharness/audit/TEST07/gpt-oss-120b/audit.config``) makes LoadGen issue each of the 990 GPQA
samples of ``acc/acc_eval_compliance_gpqa.parquet`` once and log every response; the run's accuracy log is scored
with the benchmark's accuracy script (here the manifest's metric, which prints what ``eval_mlperf_accuracy.py``
prints) and the score (``'exact_match': X``) must reach ``test07_accuracy_threshold`` of the audit config.
``TEST07/verify_accuracy.txt`` holds the script's output and the official summary, ending with ``TEST PASS`` or
``TEST FAIL``, the line the submission checker reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.submission.test09 import audit_values

VERIFY_FILE = "verify_accuracy.txt"
SCORE_PATTERN = r"'exact_match':\s*([\d.]+)"
BAR = "=" * 80


@dataclass
class Test07Result:
    output: str  # what the accuracy script printed
    score: float | None
    threshold: float

    @property
    def passed(self) -> bool:
        return self.score is not None and self.score >= self.threshold

    def text(self) -> str:
        lines = [self.output.rstrip("\n"), "", BAR, "TEST07 Verification Summary", BAR]
        if self.score is None:
            lines += ["Error: Could not parse accuracy score", "TEST FAIL"]
        else:
            lines += [f"Accuracy score: {self.score}", f"Accuracy threshold: {self.threshold}",
                      f"Accuracy check pass: {self.passed}", "TEST PASS" if self.passed else "TEST FAIL"]
        return "\n".join(lines) + "\n"


def threshold_of(audit_config: Path) -> float:
    value = audit_values(audit_config, "test07_").get("test07_accuracy_threshold")
    if value is None:
        raise MLHarnessError(f"{audit_config} has no '*.*.test07_accuracy_threshold' line")
    return value


def verify(accuracy_log: Path, audit_config: Path, scorer: Callable[[Path], Any]) -> Test07Result:
    """Score the run's accuracy log with ``scorer`` (an AccuracyResult with ``.text``) against the threshold."""
    threshold = threshold_of(audit_config)
    try:
        output = scorer(accuracy_log).text
    except MLHarnessError as e:
        output = f"the accuracy script failed: {e}\n"
    m = re.search(SCORE_PATTERN, output)
    return Test07Result(output, float(m.group(1)) if m else None, threshold)


def audit_config_for(test: str, benchmark: str) -> Path:
    """The audit config a TEST07 / TEST09 run of ``benchmark`` used: mlharness/audit/<test>/<benchmark>/."""
    from mlharness.paths import AUDIT_DIR

    path = AUDIT_DIR / test / benchmark / "audit.config"
    if not path.is_file():
        raise MLHarnessError(f"{test} has no audit config for {benchmark} ({path} is missing)")
    return path


def verify_full_log(scenario_dir: Path, test: str, scorer: Callable[[Path], Any] | None) -> tuple[bool, str, str]:
    """TEST07 or TEST09 of a <benchmark>/<scenario> directory: (passed, the verify file's text, one line for
    the terminal); the verify file is (re)written into the test's directory."""
    from mlharness.submission import test09

    test_dir = Path(scenario_dir) / test
    log = test_dir / "accuracy" / "mlperf_log_accuracy.json"
    config = audit_config_for(test, Path(scenario_dir).parent.name)
    if test == "TEST09":
        r9 = test09.verify(log, config)
        text, passed = r9.text(), r9.passed
        reason = f"mean output tokens {r9.mean:.2f}; allowed {r9.low}-{r9.high}"
        (test_dir / test09.VERIFY_FILE).write_text(text)
        return passed, text, reason
    if scorer is None:
        raise MLHarnessError(f"TEST07 of {scenario_dir} needs the accuracy metric and data set of the benchmark's "
                             f"accuracy run, which only a results tree records: verify the results tree that holds "
                             f"the runs (`mlharness audit verify TEST07 --results RESULTS`)")
    r7 = verify(log, config, scorer)
    (test_dir / VERIFY_FILE).write_text(r7.text())
    return r7.passed, r7.text(), f"exact_match {r7.score}; threshold {r7.threshold}"
