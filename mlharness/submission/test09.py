"""TEST09 (gpt-oss-120b): the mean output length of a performance-mode run that logs every sample, verified as
the official ``compliance/TEST09/run_verification.py`` does.

The audit config (``mlharness/audit/TEST09/gpt-oss-120b/audit.config``) makes LoadGen issue every sample of the
performance set once and log each response; its ``test09_min_output_tokens`` / ``test09_max_output_tokens``
lines (read here, ignored by LoadGen) bound the mean number of 4-byte token ids per logged response. The result
is ``TEST09/verify_output_len.txt`` in the official wording, ending with ``TEST PASS`` or ``TEST FAIL``, the line
the submission checker reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import MLHarnessError
from mlharness.fileguard import read_json
from mlharness.loadgen.settings import read_conf
from mlharness.userfiles import ACCURACY_LOG_LIMIT, read_log_text

VERIFY_FILE = "verify_output_len.txt"
BAR = "=" * 80


def audit_values(path: Path, prefix: str) -> dict[str, float]:
    """The ``*.*.<prefix>...`` thresholds of an audit config (inline comments dropped, as the official script
    reads them); a key whose value is not a number is left out."""
    values: dict[str, float] = {}
    lines = read_conf(Path(path), "audit config").splitlines()
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        value = value.split("#", 1)[0].strip()
        parts = key.split(".")
        if len(parts) >= 3 and parts[-1].startswith(prefix):
            try:
                values[parts[-1]] = float(value)
            except ValueError:
                continue
    return values


@dataclass
class Test09Result:
    lengths: list[int]
    low: float
    high: float

    @property
    def mean(self) -> float:
        return sum(self.lengths) / len(self.lengths) if self.lengths else 0.0

    @property
    def passed(self) -> bool:
        return self.low <= self.mean <= self.high

    def text(self) -> str:
        n, mean = len(self.lengths), self.mean
        lines = [BAR, "TEST09: Verify Output Token Length in Performance Mode", BAR, "",
                 "Output Token Length Statistics", "-" * 40, f"Total samples: {n}", f"Mean output tokens: {mean:.2f}",
                 f"Min output tokens: {min(self.lengths) if n else 0}",
                 f"Max output tokens: {max(self.lengths) if n else 0}"]
        if n:
            std = (sum((x - mean) ** 2 for x in self.lengths) / n) ** 0.5
            lines.append(f"Std deviation: {std:.2f}")
        lines += ["", BAR, "Verification Results", BAR, f"Mean output tokens: {mean:.2f}",
                  f"Min threshold: {self.low}", f"Max threshold: {self.high}",
                  f"Min check pass: {mean >= self.low}", f"Max check pass: {mean <= self.high}", "",
                  "TEST PASS" if self.passed else "TEST FAIL"]
        return "\n".join(lines) + "\n"


def verify(accuracy_log: Path, audit_config: Path) -> Test09Result:
    """Every logged response's length in int32 tokens against the audit config's bounds."""
    bounds = audit_values(audit_config, "test09_")
    if "test09_min_output_tokens" not in bounds or "test09_max_output_tokens" not in bounds:
        raise MLHarnessError(f"{audit_config} has no test09_min_output_tokens / test09_max_output_tokens lines")
    entries = read_json(Path(accuracy_log), "TEST09: accuracy log", ACCURACY_LOG_LIMIT, error=MLHarnessError)
    if not isinstance(entries, list) or not entries:
        raise MLHarnessError(f"TEST09: {accuracy_log} holds no entries (the audit run logs every sample)")
    lengths = []
    for entry in entries:
        data = entry.get("data", "") if isinstance(entry, dict) else ""
        try:
            lengths.append(len(bytes.fromhex(data.strip())) // 4 if data else 0)
        except (ValueError, AttributeError):
            lengths.append(0)
    return Test09Result(lengths, bounds["test09_min_output_tokens"], bounds["test09_max_output_tokens"])


def passes(verify_file: Path) -> bool:
    """What the checker asks of verify_output_len.txt: a ``TEST PASS`` in it."""
    if not Path(verify_file).exists():
        return False
    return "TEST PASS" in read_log_text(verify_file, "TEST09 verification")
