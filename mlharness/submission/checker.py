"""``mlharness submission check``: the submission checker's rules of one round (``--round``, the official
checker's ``--version``; default :data:`mlharness.rounds.DEFAULT_ROUND`) for a package tree.

Structure (required files, no extra files, truncated accuracy logs, files under 50 MB), system descriptions
(every field present, the meaningful ones non-empty), the runs themselves (:mod:`checker_logs`: the round's
seeds, validity and errors, 600 s minimum duration, minimum query and sample counts from the embedded
mlperf.conf, whole-dataset accuracy runs, accuracy targets in the closed division), the compliance audits
(required in closed), and the scenario set each system type must submit.

The open division is held to the rules it is held to officially: no accuracy target, no required audits,
and its scenario set is advice. ``allow_development`` turns the rules a short development run cannot meet
(duration, counts, partial dataset, early stopping) into warnings, so trees made with short settings check.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mlharness.rounds import MLPERF_BENCHMARKS, rounds_with
from mlharness.submission.findings import Findings, Report, Row, shown
from mlharness.submission.rules import (
    DIVISIONS,
    FILE_SIZE_LIMIT,
    SCENARIOS,
    STATUSES,
    SYSTEM_DESC_MEANINGFUL_FIELDS,
    SYSTEM_DESC_REQUIRED_FIELDS,
    SYSTEM_TYPES,
)

SUBMITTER_ENTRIES = {"results", "systems", "src", "documentation", "model_mapping.json"}


class Checker(Findings):
    """Walks a package tree: submitters, systems, benchmarks; each scenario through :mod:`.checker_logs`."""

    def run(self) -> Report:
        if not self.root.is_dir():
            self.error(self.root, "does not exist")
            return self.report
        submitters = []
        if (self.root / "results").is_dir() or (self.root / "systems").is_dir():
            submitters.append((self.root.parent.name, self.root))
        else:
            for division in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                if division.name not in DIVISIONS:
                    self.warning(division, f"not a division ({', '.join(DIVISIONS)}): ignored")
                    continue
                submitters += [(division.name, s) for s in sorted(division.iterdir()) if s.is_dir()]
        if not submitters:
            self.error(self.root, "holds no submission (<division>/<submitter>/results)")
        for division, sub_dir in submitters:
            self.check_submitter(division, sub_dir)
        return self.report

    def check_submitter(self, division: str, sub_dir: Path) -> None:
        if division not in DIVISIONS:
            self.error(sub_dir, f"division '{division}' is not one of {', '.join(DIVISIONS)}")
        for name in ("results", "systems", "src"):
            if not (sub_dir / name).is_dir():
                self.error(sub_dir / name, "missing")
        if (sub_dir / "src").is_dir() and not any((sub_dir / "src").iterdir()):
            self.error(sub_dir / "src", "is empty: the code (manifests, configs) must be submitted")
        for entry in sorted(sub_dir.iterdir()):
            if entry.name not in SUBMITTER_ENTRIES:
                self.warning(entry, "not part of the submission layout")
        for path in sorted(p for p in sub_dir.rglob("*") if p.is_file()):
            if path.stat().st_size > FILE_SIZE_LIMIT:
                self.error(path, f"is {path.stat().st_size / 2**20:.1f} MB; files must be under 50 MB")
        mapping = self._json(sub_dir / "model_mapping.json") if (sub_dir / "model_mapping.json").is_file() else {}
        if mapping and division != "open":
            self.error(sub_dir / "model_mapping.json", "model mappings are allowed in the open division only")
        results = sub_dir / "results"
        for system_dir in sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []:
            system = self.check_system(division, sub_dir.name, sub_dir / "systems" / f"{system_dir.name}.json")
            for bench_dir in sorted(p for p in system_dir.iterdir() if p.is_dir()):
                self.check_benchmark(division, sub_dir.name, system, bench_dir, mapping)

    def check_system(self, division: str, submitter: str, path: Path) -> dict[str, Any]:
        if not path.is_file():
            self.error(path, "missing: every system in results/ needs its system description")
            return {}
        desc = self._json(path)
        for key in SYSTEM_DESC_REQUIRED_FIELDS:
            if key not in desc:
                self.error(path, f"required field '{key}' is missing")
            elif key in SYSTEM_DESC_MEANINGFUL_FIELDS and not str(desc[key]).strip():
                self.error(path, f"required field '{key}' is empty")
        if desc.get("division") and desc["division"] != division:
            self.error(path, f"division is '{desc['division']}' but the system is submitted in '{division}'")
        if desc.get("submitter") and desc["submitter"] != submitter:
            self.error(path, f"submitter is '{desc['submitter']}', not '{submitter}'")
        if desc.get("status") and desc["status"] not in STATUSES:
            self.error(path, f"status '{desc['status']}' is not one of {', '.join(STATUSES)}")
        if desc.get("system_type") and desc["system_type"] not in SYSTEM_TYPES:
            self.error(path, f"system_type '{desc['system_type']}' is not one of {', '.join(SYSTEM_TYPES)}")
        return desc

    def check_benchmark(self, division: str, submitter: str, system: dict[str, Any], bench_dir: Path,
                        mapping: dict[str, str]) -> None:
        from mlharness.submission.checker_logs import check_scenario
        from mlharness.submission.checker_tables import one_of as one_of_optional
        from mlharness.submission.rules import benchmark_for

        name = bench_dir.name
        benchmarks = self.rules.benchmarks
        info = benchmark_for(name, mapping if division == "open" else None, benchmarks)
        official = mapping.get(name, name) if division == "open" else name
        if official in MLPERF_BENCHMARKS and official not in self.rules.round.benchmarks:
            # the official checker of the round has no rules for it and fails on the tree, in every division
            self.error(bench_dir, f"{official} is not a benchmark of round {self.rules.round.name}; round(s) "
                                  f"{', '.join(rounds_with(official))} have it: check with their --round")
        elif info is None:
            self.by_division(division, bench_dir, f"'{name}' is not a {'/'.join(benchmarks)} benchmark: only "
                                                  f"structural rules apply")
        scenarios = sorted(p.name for p in bench_dir.iterdir() if p.is_dir())
        system_type = system.get("system_type")
        if info is not None and system_type in self.rules.required_scenarios:
            required = self.rules.required_scenarios[system_type].get(info.name)
            if required is None:  # the official checker stops on the tree (its lookup returns None)
                self.by_division(division, bench_dir, f"{info.name} is not a benchmark of the '{system_type}' "
                                                      f"category in round {self.rules.round.name}: the checker's "
                                                      f"required scenarios for {system_type} systems have no row "
                                                      f"for it, and the official checker fails on the tree")
            else:
                optional = self.rules.optional_scenarios.get(system_type, {}).get(info.name, ())
                one_of = one_of_optional(optional)
                missing = [s for s in required if s not in scenarios]
                if one_of and not set(one_of) & set(scenarios):
                    missing.append(f"at least one of {' / '.join(one_of)}")
                unknown = [s for s in scenarios if s in SCENARIOS and s not in required and s not in optional]
                if missing:
                    self.by_division(division, bench_dir, f"missing required scenario(s) for {system_type} "
                                                          f"systems: {', '.join(missing)}")
                if unknown:
                    self.by_division(division, bench_dir, f"scenario(s) not allowed for {system_type} systems: "
                                                          f"{', '.join(unknown)}")
        for scenario in scenarios:
            self._row = Row(division, submitter, bench_dir.parent.name, name, scenario)
            check_scenario(self, division, info, bench_dir / scenario)
            self.report.rows.append(self._row)
            self._row = None


def check(root: Path, allow_development: bool = False, round_name: str | None = None) -> Report:
    return Checker(root, allow_development, round_name).run()


def exit_status(report: Report) -> int:
    """The CLI's exit codes: 0 passed; 4 when a compliance audit did not pass; 2 for any other problem: the
    package is input that breaks the rules (1 stays reserved for bugs)."""
    if report.passed:
        return 0
    audit = any(re.fullmatch(r"TEST0\d did not pass", f.message) for f in report.errors)
    return 4 if audit else 2


def print_report(report: Report, console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    def text(value: object) -> str:  # names and messages from the tree: one visible line, no markup
        return escape(shown(value))

    for finding in report.findings:
        colour = "red" if finding.level == "error" else "yellow"
        console.print(f"[{colour}]{finding.level.upper()}[/] {text(finding.path)}: {text(finding.message)}",
                      highlight=False, soft_wrap=True)
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in report.rows:
        groups.setdefault((r.division, r.submitter), []).append(r)
    for (division, submitter), rows in groups.items():
        table = Table(title=f"submission check: {text(division)}/{text(submitter)}")
        for column in ("system", "benchmark", "scenario", "result", "accuracy", "compliance", "problems"):
            table.add_column(column)
        for r in rows:
            table.add_row(text(r.system), text(r.benchmark), text(r.scenario), text(r.result), text(r.accuracy),
                          text(r.compliance), "[green]0[/]" if not r.problems else f"[red]{r.problems}[/]")
        console.print(table)
    verdict = "[green]PASSED[/]" if report.passed else "[red]FAILED[/]"
    console.print(f"{verdict}: {len(report.errors)} problem(s), {len(report.warnings)} warning(s) (round "
                  f"{report.round}; the official checker's --version {report.round})", highlight=False)
