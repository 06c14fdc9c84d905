"""``mlharness submission package``: a results tree made by ``submission run`` → the submission layout

    <out>/<division>/<submitter>/
        src/<system>/<benchmark>/...     manifests, hook files, user.conf, audit configs, versions
        systems/<system>.json            the system description
        results/<system>/<benchmark>/<scenario>/...
        model_mapping.json               open division: custom benchmark names -> MLPerf benchmarks

Accuracy logs are truncated byte for byte as tools/submission/truncate_accuracy_log.py does it: ``"\nhash=<sha256
of the full log>\n"`` is appended to accuracy.txt and a log of 4096 bytes or more keeps its first and last 4096
characters around ``"\n\n...\n\n"``. That applies to the scenario's accuracy log and to TEST01's when
TEST01/accuracy holds an accuracy.txt. The full logs are copied first into an archive folder beside the package
(the results tree keeps its own copy as well).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from mlharness.errors import MLHarnessError, SettingsError
from mlharness.fileguard import describe_kind, hash_file, iter_lines, open_text
from mlharness.manifest.names import name_problem
from mlharness.submission.endpoints import is_endpoints_benchmark, write_endpoints_result
from mlharness.submission.findings import shown
from mlharness.submission.intake import check_packable
from mlharness.submission.layout import Tree, replace_dir, stamp, unique
from mlharness.submission.round_check import round_to_package
from mlharness.submission.rules import (
    BENCHMARKS,
    DEFAULT_BENCHMARK_FOR_MODEL,
    DIVISIONS,
    MAX_ACCURACY_LOG_SIZE,
    TRUNCATION_MARK,
    VIEWABLE_SIZE,
)
from mlharness.submission.system import finalize, load_overrides
from mlharness.userfiles import read_optional_json

ACCURACY_LOG = "mlperf_log_accuracy.json"


class PackageWriteError(MLHarnessError):
    """Writing the package failed (the environment, not the tree): exit status 3."""

    exit_code = 3


@dataclass
class PackageReport:
    submitter_dir: Path
    archive: Path
    round: str  # the MLPerf round every run in the package was made for
    notes: list[str] = field(default_factory=list)
    truncated: list[Path] = field(default_factory=list)


def sha256_file(path: Path) -> str:
    return hash_file(path, "accuracy log")


def truncate_accuracy_log(log_path: Path, accuracy_txt: Path, archive_path: Path) -> str:
    """Archive the full log, then do what tools/submission/truncate_accuracy_log.py does to it: append
    ``"\nhash=<sha256 of the full log>\n"`` to accuracy.txt (a blank line before ``hash=`` when accuracy.txt
    ends with a newline) and keep the first and last 4096 characters of a log of 4096 bytes or more around
    ``"\n\n...\n\n"`` (a log of 4096 to 8192 bytes grows: both ends overlap). A log already truncated (a
    ``hash=`` line in accuracy.txt and under 10 KiB) is left as it is, as the official script leaves it.
    Returns the hash in accuracy.txt."""
    existing = _hash_line(accuracy_txt)
    if existing and log_path.stat().st_size < MAX_ACCURACY_LOG_SIZE:
        return existing
    digest = sha256_file(log_path)
    archive_path.parent.mkdir(parents=True, exist_ok=True)
    if archive_path.exists() and sha256_file(archive_path) != digest:
        archive_path.rename(unique(archive_path.with_name(archive_path.name + ".previous")))
    shutil.copy2(log_path, archive_path)
    if sha256_file(archive_path) != digest:
        raise MLHarnessError(f"copying {log_path} to {archive_path} did not preserve it; nothing was truncated")
    with open(accuracy_txt, "a", encoding="utf-8") as f:
        f.write(f"\nhash={digest}\n")
    _truncate_file(log_path)
    if log_path.stat().st_size > MAX_ACCURACY_LOG_SIZE:  # only with multi-byte characters, never in LoadGen's logs
        raise MLHarnessError(f"{log_path} is still larger than {MAX_ACCURACY_LOG_SIZE} bytes after truncation")
    return digest


def _hash_line(accuracy_txt: Path) -> str | None:
    if not accuracy_txt.is_file():
        return None
    for _, line in iter_lines(accuracy_txt, "accuracy.txt"):
        m = re.match(r"^hash=([\w\d]+)$", line)
        if m:
            return m.group(1)
    return None


def _truncate_file(path: Path) -> None:
    """truncate_file() of the official script, text mode and all: the first VIEWABLE_SIZE characters, the
    mark, and the VIEWABLE_SIZE characters from byte size - VIEWABLE_SIZE on."""
    size = path.stat().st_size
    if size < VIEWABLE_SIZE:
        return
    with open_text(path, "accuracy log") as src:
        start = src.read(VIEWABLE_SIZE)
        src.seek(size - VIEWABLE_SIZE, 0)
        end = src.read(VIEWABLE_SIZE)
    with open(path, "w", encoding="utf-8") as dst:
        dst.write(start)
        dst.write(TRUNCATION_MARK)
        dst.write(end)


def package(results: Path, out: Path, archive: Path | None = None, system_overrides: Path | None = None,
            force: bool = False, round_name: str | None = None) -> PackageReport:
    """Everything is checked before anything is written (:func:`check_packable`: real files, no outside hard
    links, complete runs; the round's seeds and suite), and the package is assembled beside its place and moved
    in only when whole: a refused or failed package leaves an earlier one as it was."""
    tree = Tree(results)
    state = tree.read_state()
    if not state:
        raise SettingsError(f"{tree.root} is not a results tree made by `mlharness submission run` (no "
                            f"{tree.archive.name}/submission.json)")
    division, submitter = _state_names(tree, state)
    out = Path(out).resolve()
    sub_dir = out / division / submitter
    archive = Path(archive).resolve() if archive else out.parent / f"{out.name}-accuracy-logs"
    if os.path.lexists(sub_dir):
        if not force:
            raise SettingsError(f"{sub_dir} already exists (--force replaces it)")
        if not sub_dir.is_dir() or sub_dir.is_symlink():
            raise SettingsError(f"{sub_dir} is {_kind(sub_dir)}, not a package folder: --force replaces only a "
                                f"folder; remove it yourself if it should go")
    notes = [f"moved a failed run's folder out of the results tree: {moved}" for moved in tree.sweep_leftovers()]
    check_packable(tree)
    round_name = round_to_package(tree, state, round_name)  # refuses runs of another round, before writing
    scenarios = tree.scenario_dirs()
    if not scenarios:
        raise SettingsError(f"{tree.root} holds no results")
    report = PackageReport(sub_dir, archive, round_name, notes)
    staged = sub_dir.parent / f".{submitter}.partial-{stamp()}-{os.getpid()}"
    try:
        staged.mkdir(parents=True)
        _assemble(tree, state, scenarios, staged, sub_dir, out, archive, system_overrides, report)
        replace_dir(staged, sub_dir, sub_dir.parent / f".{submitter}.old-{os.getpid()}")
    except BaseException as e:
        shutil.rmtree(staged, ignore_errors=True)
        if isinstance(e, OSError):  # a full disk, a read-only folder, a file where the package's folder goes
            raise PackageWriteError(f"cannot write the package: {shown(e.filename or staged)}: "
                                    f"{e.strerror or e}; nothing was packaged, an earlier package at {sub_dir} "
                                    f"is as it was") from e
        raise
    return report


def _assemble(tree: Tree, state: dict, scenarios: list, staged: Path, sub_dir: Path, out: Path, archive: Path,
              system_overrides: Path | None, report: PackageReport) -> None:
    """The package in ``staged``; full accuracy logs are archived under the path they have in the final one."""
    division = state["division"]
    systems = sorted({s for s, _, _, _ in scenarios})
    for system, bench, scen, path in scenarios:
        dest = staged / "results" / system / bench / scen
        shutil.copytree(path, dest)
        model = state.get("benchmarks", {}).get(f"{system}/{bench}", {}).get("mlperf_model")
        if is_endpoints_benchmark(bench) or is_endpoints_benchmark(DEFAULT_BENCHMARK_FOR_MODEL.get(model)):
            # the layout the checker reads for it (endpoints.py says why); counted before the log is truncated
            write_endpoints_result(dest, tree.record_dir(system, bench, scen, "performance"))
            report.notes.append(f"{system}/{bench}/{scen}: written in the endpoints client's layout (config.yaml, "
                                f"performance/result_summary.json, accuracy/accuracy_results.json)")
        for acc in (dest / "accuracy", dest / "TEST01" / "accuracy"):
            # the official script truncates the scenario's log, and TEST01's when TEST01/accuracy holds an
            # accuracy.txt (the non-deterministic fallback); without accuracy.txt it leaves a log whole
            if (acc / ACCURACY_LOG).is_file() and (acc / "accuracy.txt").is_file():
                final = sub_dir / acc.relative_to(staged) / ACCURACY_LOG
                truncate_accuracy_log(acc / ACCURACY_LOG, acc / "accuracy.txt", archive / final.relative_to(out))
                report.truncated.append(final)
    if (tree.archive / "src").is_dir():
        shutil.copytree(tree.archive / "src", staged / "src")
    else:
        report.notes.append("no src/ snapshot in the results tree: src/ holds only the versions")
    (staged / "src").mkdir(exist_ok=True)
    _write_systems(tree, state, systems, staged, load_overrides(system_overrides), report)
    mapping = _model_mapping(state, division)
    if mapping:
        (staged / "model_mapping.json").write_text(json.dumps(mapping, indent=2) + "\n")
    for key, entry in sorted(state.get("benchmarks", {}).items()):
        for note in entry.get("measurements_notes", []):
            report.notes.append(f"{key} measurements.json: {note}")


def _state_names(tree: Tree, state: dict) -> tuple[str, str]:
    """The division and submitter recorded in the tree's state, refused unless they are what a package's
    folders can be named; the state's tables must be JSON objects of objects."""
    where = tree.archive / "submission.json"
    division, submitter = state.get("division"), state.get("submitter")
    if division not in DIVISIONS:
        raise SettingsError(f"{where}: field 'division' is {shown(repr(division))}, not one of "
                            f"{', '.join(DIVISIONS)}")
    if not isinstance(submitter, str) or name_problem(submitter) is not None:
        raise SettingsError(f"{where}: field 'submitter' is {shown(repr(submitter))}, not a folder name")
    for key in ("systems", "benchmarks"):
        table = state.get(key, {})
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise SettingsError(f"{where}: field '{key}' must be a JSON object of objects")
    return division, submitter


def _kind(path: Path) -> str:
    st = os.lstat(path)
    return "a file" if stat.S_ISREG(st.st_mode) else describe_kind(st.st_mode)


def _write_systems(tree: Tree, state: dict, systems: list[str], sub_dir: Path, overrides: dict[str, str],
                   report: PackageReport) -> None:
    (sub_dir / "systems").mkdir(parents=True, exist_ok=True)
    for system in systems:
        recorded = state.get("systems", {}).get(system)
        if recorded is None:
            raise SettingsError(f"no system description was recorded for '{system}' (run `submission run` for it)")
        layer = {"division": state["division"], "submitter": state["submitter"], "system_name": system}
        frameworks = _frameworks_used(tree, system)
        if frameworks:
            layer["framework"] = ", ".join(frameworks)
        desc = finalize(recorded["fields"], recorded["sources"], layer, "submission")
        if overrides:
            desc = finalize(desc.fields, desc.sources, overrides, "override")
        (sub_dir / "systems" / f"{system}.json").write_text(json.dumps(desc.to_json(), indent=2) + "\n")
        if desc.missing:
            report.notes.append(f"systems/{system}.json: no value for {', '.join(desc.missing)} (set them with "
                                f"--system-overrides FILE.yaml)")
        report.notes.extend(f"systems/{system}.json: {p}" for p in desc.problems)


def _frameworks_used(tree: Tree, system: str) -> list[str]:
    """'onnxruntime 1.20.1' for every framework the system's performance runs used (from their metadata)."""
    found = []
    for meta in sorted((tree.archive / "runs" / system).glob("*/*/performance/mlharness_run.json")):
        try:
            fw = read_optional_json(meta, "run record")["framework"]
        except (KeyError, TypeError):
            continue
        found.append(f"{fw['name']} {fw['version']}")
    return list(dict.fromkeys(found))


def _model_mapping(state: dict, division: str) -> dict[str, str]:
    """Open division: results directories named after a custom benchmark map to the MLPerf benchmark of their
    mlperf.model, as the checker's model_mapping.json expects."""
    if division != "open":
        return {}
    mapping = {}
    for key, entry in state.get("benchmarks", {}).items():
        bench = key.split("/", 1)[1]
        model = entry.get("mlperf_model")
        if bench not in BENCHMARKS and model in DEFAULT_BENCHMARK_FOR_MODEL:
            mapping[bench] = DEFAULT_BENCHMARK_FOR_MODEL[model]
    return mapping
