"""What the LLM submission tests share: a results tree made by ``mlharness submission run`` with a token oracle,
the package check whose only findings must be the development settings (the same findings are the errors
without ``--allow-development``), and the figures the checker's patterns read from an accuracy text."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.helpers.cli import cli

OVERRIDES = {"status": "available", "system_type": "datacenter", "cooling": "air",
             "host_memory_configuration": "1x 24 GB", "host_networking_topology": "N/A",
             "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}


def submission_tree(env: dict[str, str], work: Path, manifest: str, system: str, scenarios: tuple[str, ...],
                    *extra: str) -> dict[str, object]:
    """``submission run`` of ``manifest`` into ``work/results`` (open division, 1-second runs): the work folder,
    the results folder and the finished process."""
    overrides = work / "system.yaml"
    overrides.write_text(yaml.safe_dump(OVERRIDES))
    results = work / "results"
    proc = cli(env, "submission", "run", "--manifest", manifest, "--scenarios", *scenarios, "--division", "open",
               "--submitter", "Acme", "--system-name", system, "--results", str(results), "--system-overrides",
               str(overrides), "--min-duration-ms", "1000", *extra)
    return {"work": work, "results": results, "proc": proc}


def package(env: dict[str, str], tree: dict[str, object]) -> Path:
    """``submission package`` of the tree's results into ``work/package``."""
    out = Path(str(tree["work"])) / "package"
    proc = cli(env, "submission", "package", "--results", str(tree["results"]), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def check_development_only(env: dict[str, str], out: Path, expected: str) -> str:
    """``submission check`` of a package: it passes with ``--allow-development``, one tolerated finding contains
    ``expected``, and without the allowance exactly those findings are the errors. The lenient output."""
    lenient = cli(env, "submission", "check", str(out), "--allow-development")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert "PASSED: 0 problem(s)" in lenient.stdout
    tolerated = {line.removeprefix("WARNING ").removesuffix(" (tolerated: --allow-development)")
                 for line in lenient.stdout.splitlines() if line.endswith("(tolerated: --allow-development)")}
    assert any(expected in t for t in tolerated), lenient.stdout
    strict = cli(env, "submission", "check", str(out))
    errors = {line.removeprefix("ERROR ") for line in strict.stdout.splitlines() if line.startswith("ERROR ")}
    assert strict.returncode == 2 and errors == tolerated, strict.stdout
    return lenient.stdout


def summary_row(stdout: str, benchmark: str, scenario: str) -> str:
    """The check's summary line of one benchmark and scenario."""
    rows = [line for line in stdout.splitlines() if f" {benchmark} " in line and f" {scenario} " in line]
    assert rows, stdout
    return rows[0]


def pattern_values(text: str, patterns: dict[str, str]) -> dict[str, float]:
    """The figures the submission checker's patterns (``ACC_PATTERN``) read from an accuracy text: key -> the
    number of the last line each pattern matches."""
    found = {}
    for line in text.splitlines():
        for key, pattern in patterns.items():
            m = re.match(pattern, line)
            if m:
                found[key] = float(m.group(1))
    return found
