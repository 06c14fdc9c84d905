"""Compliance verdicts of a results or submission tree: the ``verify_*.txt`` files of every ``TESTnn`` folder
(``<benchmark>/<scenario>/TESTnn/`` in a results tree, ``compliance/<system>/<benchmark>/<scenario>/TESTnn/``
in a submission), read the way the submission checker reads them (a ``TEST PASS`` line), with the numbers that
decided the verdict."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mlharness.report import units
from mlharness.report.treefiles import read_text, shown

TEST_DIR = re.compile(r"^TEST\d\d$")
# lines of the official outputs that carry the deciding numbers, in the order they are shown
_NUMBER_LINE = re.compile(r"^\s*([A-Za-z][\w ./()%-]*?)\s*[=:]\s*(-?[\d.,eE+-]+|True|False|Skipped)\s*$")
_KEEP = re.compile(r"score|mismatch|match|missing|mean|threshold|check pass|accuracy|tokens|delta|samples",
                   re.IGNORECASE)


@dataclass
class Verdict:
    path: Path  # the verify_*.txt file
    rel: str  # its folder, relative to the report's root
    test: str  # TEST01 ...
    check: str  # accuracy / performance / output_len
    benchmark: str
    scenario: str
    passed: bool | None  # None: the file says neither pass nor fail
    verdict_line: str
    numbers: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return {True: "PASS", False: "FAIL", None: "UNKNOWN"}[self.passed]

    def summary(self) -> str:
        """One line: the test, check, verdict and the numbers that decided it."""
        head = f"{self.test} {self.check} {self.label}"
        detail = "; ".join(self.numbers)
        if self.passed is False and self.verdict_line not in ("TEST FAIL", ""):
            detail = f"{self.verdict_line}; {detail}" if detail else self.verdict_line
        return f"{head}: {detail}" if detail else head


def _score_change(values: dict[str, str], rule: str) -> str | None:
    ref = values.get("reference score")
    test = values.get("test score")
    try:
        r, t = float(ref), float(test)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    change = f" ({(t / r - 1) * 100:+.1f}%)" if r else ""
    if rule.startswith("scores in ns"):  # latencies: shown in ms like every latency of the report
        text = f"test score {units.ms_from_ns(t)} ms vs reference {units.ms_from_ns(r)} ms{change}"
        rule = rule.replace("scores in ns", "scores in ms", 1)
    else:
        text = f"test score {units.number(t)} vs reference {units.number(r)}{change}"
    return text + (f"; {rule}" if rule else "")


def _rule(lines: list[str]) -> str:
    """The unit and the rule that mlharness's verify_performance.txt states on its ``mlharness:`` line."""
    line = next((x for x in lines if x.startswith("mlharness:")), "")
    m = re.search(r"scores in (.*?); (.*)$", line)
    return f"scores in {m.group(1)}; {m.group(2)}" if m else ""


def parse_verify(text: str) -> tuple[bool | None, str, list[str]]:
    """(passed, the verdict line, the deciding numbers) of a verify_*.txt file."""
    lines = [line.strip() for line in text.splitlines()]
    verdict = next((line for line in reversed(lines) if line.startswith("TEST PASS") or
                    line.startswith("TEST FAIL")), "")
    passed: bool | None = verdict.startswith("TEST PASS") if verdict else None
    if passed is None:  # TEST06 states its verdict in words of its own
        m = next((line for line in lines if re.match(r"TEST\d\d verification (complete|failed)", line)), "")
        if m:
            passed, verdict = m.endswith("complete"), m
    values: dict[str, str] = {}
    numbers: list[str] = []
    for line in lines:
        m = _NUMBER_LINE.match(line)
        if not m or not _KEEP.search(m.group(1)):
            continue
        key, value = m.group(1).strip(), m.group(2)
        values.setdefault(key.lower(), value)
        if key.lower() not in ("reference score", "test score"):
            if value in ("True", "False", "Skipped") or passed is False or len(numbers) < 4:
                numbers.append(f"{key} = {value}")
    change = _score_change(values, _rule(lines))
    if change:
        numbers.insert(0, change)
    if passed is False:  # the failing checks first
        numbers.sort(key=lambda x: not (x.endswith("= False") or "mismatch" in x and not x.endswith("= 0")))
    return passed, verdict, numbers[:6]


def _check_name(path: Path) -> str:
    return path.stem.removeprefix("verify_")


def find_verdicts(root: Path) -> list[Verdict]:
    """Every verify_*.txt directly inside a TESTnn folder under ``root``, sorted by path."""
    out = []
    root = Path(root)
    for path in sorted(root.rglob("verify_*.txt")):
        test_dir = path.parent
        if not TEST_DIR.match(test_dir.name):
            continue
        rel_parts = test_dir.relative_to(root).parts if test_dir != root else ()
        if any(p.startswith(".") for p in rel_parts):
            continue
        passed, line, numbers = parse_verify(read_text(path, "the compliance verdict"))
        out.append(Verdict(path=path, rel=shown(test_dir.relative_to(root)) if test_dir != root else ".",
                           test=test_dir.name, check=shown(_check_name(path)),
                           benchmark=shown(test_dir.parent.parent.name), scenario=shown(test_dir.parent.name),
                           passed=passed, verdict_line=line, numbers=numbers))
    return out


def test_of(rel: str) -> tuple[int, str] | None:
    """(index, TESTnn) of the compliance folder in a run's relative path, if it lies in one."""
    for i, part in enumerate(Path(rel).parts):
        if TEST_DIR.match(part):
            return i, part
    return None
