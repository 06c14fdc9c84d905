"""What the submission tests share (LLMs first, then every benchmark's): a results tree made by ``mlharness
submission run`` (the common arguments: open division, Acme, the system overrides), the package check whose only
findings must be the development settings (the same findings are the errors without ``--allow-development``),
the figures the checker's patterns read from an accuracy text, and the official v6.1 checker: where it is
(``MLHARNESS_INFERENCE_REPO``), its run on a package, its ERROR lines and its constants."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.helpers.cli import cli

OVERRIDES = {"status": "available", "system_type": "datacenter", "cooling": "air",
             "host_memory_configuration": "1x 24 GB", "host_networking_topology": "N/A",
             "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}


def run_args(work: Path, system: str, scenarios: tuple[str, ...] | list[str],
             system_overrides: dict[str, str] = OVERRIDES) -> list[str]:
    """The arguments every ``submission run`` of these tests shares, after ``--manifest``: the scenarios, the open
    division, submitter Acme, ``system``, ``work/results`` and ``system_overrides`` written to
    ``work/system.yaml``."""
    overrides = work / "system.yaml"
    overrides.write_text(yaml.safe_dump(system_overrides))
    return ["--scenarios", *scenarios, "--division", "open", "--submitter", "Acme", "--system-name", system,
            "--results", str(work / "results"), "--system-overrides", str(overrides)]


def submission_tree(env: dict[str, str], work: Path, manifest: str, system: str, scenarios: tuple[str, ...],
                    *extra: str, timeout: float = 300) -> dict[str, object]:
    """``submission run`` of ``manifest`` into ``work/results`` (open division, 1-second runs): the work folder,
    the results folder and the finished process."""
    proc = cli(env, "submission", "run", "--manifest", manifest, *run_args(work, system, scenarios),
               "--min-duration-ms", "1000", *extra, timeout=timeout)
    return {"work": work, "results": work / "results", "proc": proc}


def package(env: dict[str, str], tree: dict[str, object]) -> Path:
    """``submission package`` of the tree's results into ``work/package``."""
    out = Path(str(tree["work"])) / "package"
    proc = cli(env, "submission", "package", "--results", str(tree["results"]), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def lenient_findings(env: dict[str, str], out: Path) -> tuple[str, set[str]]:
    """``submission check --allow-development`` of a package, which must pass: its output and the findings it
    tolerated."""
    lenient = cli(env, "submission", "check", str(out), "--allow-development")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert "PASSED: 0 problem(s)" in lenient.stdout
    return lenient.stdout, {line.removeprefix("WARNING ").removesuffix(" (tolerated: --allow-development)")
                            for line in lenient.stdout.splitlines()
                            if line.endswith("(tolerated: --allow-development)")}


def strict_errors(env: dict[str, str], out: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``submission check`` of a package without the allowance: the process and its ERROR findings."""
    strict = cli(env, "submission", "check", str(out))
    return strict, {line.removeprefix("ERROR ") for line in strict.stdout.splitlines() if line.startswith("ERROR ")}


def check_development_only(env: dict[str, str], out: Path, expected: str) -> str:
    """``submission check`` of a package: it passes with ``--allow-development``, one tolerated finding contains
    ``expected``, and without the allowance exactly those findings are the errors. The lenient output."""
    stdout, tolerated = lenient_findings(env, out)
    assert any(expected in t for t in tolerated), stdout
    strict, errors = strict_errors(env, out)
    assert strict.returncode == 2 and errors == tolerated, strict.stdout
    return stdout


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


def official_checker() -> Path | None:
    """The official submission checker's folder (``tools/submission`` of ``MLHARNESS_INFERENCE_REPO``), or None."""
    repo = os.environ.get("MLHARNESS_INFERENCE_REPO")
    tool = Path(repo) / "tools" / "submission" if repo else None
    return tool if tool is not None and (tool / "submission_checker" / "main.py").is_file() else None


needs_official_checker = pytest.mark.skipif(official_checker() is None, reason="MLHARNESS_INFERENCE_REPO names no "
                                                                               "mlcommons/inference checkout")


def run_official(root: Path, has_errors: bool = True) -> str:
    """The official v6.1 checker on the package ``root``: its output (stdout and stderr), with no traceback and,
    where ``has_errors``, its summary saying the submission has errors."""
    proc = subprocess.run([sys.executable, "-m", "submission_checker.main", "--input", str(root), "--version",
                           "v6.1"], capture_output=True, text=True, timeout=120, cwd=official_checker())
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert not has_errors or "SUMMARY: submission has errors" in out, out[-3000:]
    return out


def official_error_lines(out: str) -> list[str]:
    """The official checker's ERROR lines without their ``[time ... ERROR]`` prefix: ``<path> <finding>``."""
    return [re.sub(r"^\[[^]]*\] ", "", line) for line in out.splitlines() if " ERROR] " in line]


def official_constants() -> ModuleType:
    """The official checker's ``submission_checker/constants.py`` (plain data: no imports), loaded by path."""
    path = official_checker() / "submission_checker" / "constants.py"
    spec = importlib.util.spec_from_file_location("official_constants", path)
    constants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(constants)
    return constants
