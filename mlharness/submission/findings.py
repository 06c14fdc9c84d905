"""The findings of ``mlharness submission check``: each problem with its path and level, the results table's
rows, and the report; :class:`Findings` is what the checker's rules record into."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.fileguard import UnusableFile, read_text_bounded
from mlharness.submission.rules import FILE_SIZE_LIMIT, RoundRules, rules_for

# C0 and C1 controls, DEL, the Unicode line and paragraph separators and lone surrogates (an undecodable byte of a
# file name): printed raw, a name holding them could start a line of its own ("\nERROR ...") or move the cursor
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def shown(text: object) -> str:
    """``text`` as the checker prints it: every control character written as its escape (``\\n``, ``\\x1b``), so
    a file name from the tree is one visible name on one line and can never forge a line of the report."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"),
                            str(text))


def listed(items: list[str], limit: int = 6) -> str:
    """The first ``limit`` of ``items`` joined by '; ', the rest counted ('; and 3 more'), for one error line."""
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


@dataclass
class Finding:
    level: str  # "error" or "warning"
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.level.upper()} {shown(self.path)}: {shown(self.message)}"


@dataclass
class Row:
    division: str
    submitter: str
    system: str
    benchmark: str
    scenario: str
    result: str = "-"
    accuracy: str = "-"
    compliance: str = "-"
    problems: int = 0


@dataclass
class Report:
    root: Path
    round: str = ""
    findings: list[Finding] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    @property
    def passed(self) -> bool:
        return not self.errors


class Findings:
    """What a check found, path by path: errors, warnings (advice, tolerated development settings) and the row of
    the results table being checked; :class:`mlharness.submission.checker.Checker` walks the tree and the rules
    of :mod:`mlharness.submission.checker_logs` record into it."""

    def __init__(self, root: Path, allow_development: bool = False, round_name: str | None = None):
        self.root = Path(root).resolve()
        self.allow_development = allow_development
        self.rules: RoundRules = rules_for(round_name)
        self.report = Report(self.root, self.rules.round.name)
        self._row: Row | None = None
        self._advisory = False

    def _rel(self, path: Path | str) -> str:
        path = Path(path)
        try:
            return str(path.relative_to(self.root)) or "."
        except ValueError:
            return str(path)

    def error(self, path: Path | str, message: str) -> None:
        if self._advisory:
            self.warning(path, message)
            return
        self.report.findings.append(Finding("error", self._rel(path), message))
        if self._row is not None:
            self._row.problems += 1

    @contextlib.contextmanager
    def advisory(self, on: bool = True) -> Iterator[None]:
        """Within: problems are warnings (the open division's compliance directories, which it need not have)."""
        previous, self._advisory = self._advisory, on or self._advisory
        try:
            yield
        finally:
            self._advisory = previous

    def warning(self, path: Path | str, message: str) -> None:
        self.report.findings.append(Finding("warning", self._rel(path), message))

    def development(self, path: Path | str, message: str) -> None:
        """A rule a short development run cannot meet."""
        if self.allow_development:
            self.warning(path, message + " (tolerated: --allow-development)")
        else:
            self.error(path, message)

    def by_division(self, division: str, path: Path | str, message: str) -> None:
        """Required in closed and network; advice in open."""
        (self.warning if division == "open" else self.error)(path, message)

    @property
    def row(self) -> Row:
        assert self._row is not None
        return self._row

    def _json(self, path: Path) -> dict[str, Any]:
        try:  # bounded: the checker refuses files over FILE_SIZE_LIMIT anyway, and a sparse one must not fill memory
            data = json.loads(read_text_bounded(path, "JSON file", FILE_SIZE_LIMIT, error=UnusableFile))
        except UnusableFile as e:
            self.error(path, str(e).replace(f"JSON file {path} ", "", 1))
            return {}
        except (OSError, json.JSONDecodeError) as e:
            self.error(path, f"is not valid JSON: {e}")
            return {}
        if not isinstance(data, dict):
            self.error(path, "must hold a JSON object")
            return {}
        return data
