"""What ``mlharness submission package`` accepts from a results tree, checked before it writes anything.

- Regular files and folders only. A symbolic link would package what it points at (or loop); a FIFO blocks the
  copy for ever; a device never ends; a socket cannot be copied at all.
- No hard link to a file outside the results tree: the package would carry bytes the tree does not own, which
  change when the other name is written. Links inside the tree are fine (``submission run`` links each audit's
  logs into its record folder under ``.mlharness/runs``).
- Complete runs only. A run that was interrupted or failed leaves its LoadGen logs missing or cut short, and
  the official checker fails on such a tree with a ``TypeError`` instead of reporting it; each scenario's
  ``accuracy/`` and ``performance/run_1`` (and every audit's ``performance/run_1``) must hold LoadGen's logs in
  full, the performance runs with their result lines.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from mlharness.errors import SettingsError
from mlharness.fileguard import describe_kind, open_regular
from mlharness.submission.findings import listed, shown
from mlharness.submission.layout import Tree
from mlharness.submission.rules import (
    COMPLIANCE_TESTS,
    FILE_SIZE_LIMIT,
    REQUIRED_ACC_FILES,
    REQUIRED_PERF_FILES,
    SCENARIOS,
)

# how each of LoadGen's logs ends when it was written in full (as mlharness.run.rundir checks after a run)
LOG_ENDINGS = {"mlperf_log_summary.txt": ("encountered during test.", "See detailed log."),
               "mlperf_log_detail.txt": ("}",)}
TAIL = 256  # bytes read from the end of a log to see how it ends
# the lines LoadGen writes last, when a performance test has ended: without them the checker has no result
RESULT_LINES = {"mlperf_log_detail.txt": (re.compile(rb'"key"\s*:\s*"result_validity"'), "result_validity"),
                "mlperf_log_summary.txt": (re.compile(rb"^Result is\s*:", re.MULTILINE), "Result is")}


def check_packable(tree: Tree) -> None:
    """Raise :class:`SettingsError` (exit 2) naming the first file that is not a regular file or folder, or
    that is a hard link to a file outside the tree, then naming every incomplete run; nothing is written."""
    packaged = [tree.root] + ([tree.archive / "src"] if (tree.archive / "src").is_dir() else [])
    linked: dict[tuple[int, int], list] = {}  # (device, inode) -> [first path, links, links seen in the tree]
    for top in packaged:
        for path, st in _walk(top, skip=tree.archive):
            if stat.S_ISLNK(st.st_mode):
                raise SettingsError(f"{shown(path)} in the results tree {shown(tree.root)} is a symlink (to "
                                    f"{shown(os.readlink(path))}); a submission holds real files only: replace it "
                                    f"with what it points at, or remove it. Nothing was packaged")
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                linked.setdefault((st.st_dev, st.st_ino), [path, st.st_nlink, 0])[2] += 1
            elif not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
                raise SettingsError(f"{shown(path)} in the results tree {shown(tree.root)} is "
                                    f"{describe_kind(st.st_mode)}, not a regular file; a submission holds regular "
                                    f"files and folders only: remove it. Nothing was packaged")
    if linked and tree.archive.is_dir():  # the other names of a link may be in the archive's records
        for _path, st in _walk(tree.archive, skip=tree.archive / "src"):
            if (st.st_dev, st.st_ino) in linked:
                linked[(st.st_dev, st.st_ino)][2] += 1
    for path, links, inside in linked.values():
        if inside < links:
            raise SettingsError(f"{shown(path)} in the results tree {shown(tree.root)} is a hard link: "
                                f"{links - inside} of its {links} names are outside the tree, so the package "
                                f"would share a file with them; a submission holds its own files only: replace it "
                                f"with a copy of its own, or remove it. Nothing was packaged")
    _check_complete(tree)


def _walk(top: Path, skip: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry under ``top`` (``skip`` left out) with its own status, links not followed."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                path = Path(entry.path)
                if path == skip:
                    continue
                st = entry.stat(follow_symlinks=False)
                yield path, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(path)
        except OSError as e:
            raise SettingsError(f"{shown(e.filename or folder)} in the results tree cannot be read: "
                                f"{e.strerror or e}. Nothing was packaged") from None


def _check_complete(tree: Tree) -> None:
    incomplete = []
    for _system, _bench, scenario, scen_dir in tree.scenario_dirs():
        if scenario not in SCENARIOS:
            continue  # not a scenario: the checker names it, it holds no run to read
        runs = [("accuracy", REQUIRED_ACC_FILES, False), ("performance/run_1", REQUIRED_PERF_FILES, True)]
        runs += [(f"{test}/performance/run_1", REQUIRED_PERF_FILES, True) for test in COMPLIANCE_TESTS
                 if (scen_dir / test / "performance").is_dir()]
        for rel, required, perf in runs:
            missing = _run_problems(scen_dir / rel, required, perf)
            if missing:
                incomplete.append(f"{shown(scen_dir.relative_to(tree.root) / rel)}: {', '.join(missing)}")
    if incomplete:
        raise SettingsError(f"{len(incomplete)} run folder(s) in {shown(tree.root)} are incomplete: "
                            f"{listed(incomplete)}. A run that was interrupted or failed leaves its "
                            f"logs missing or cut short, and the official checker cannot read such a tree. Redo them "
                            f"(`mlharness submission run ... --resume` runs only what is not complete), or remove "
                            f"their scenario folder. Nothing was packaged")


def _run_problems(folder: Path, required: tuple[str, ...], perf: bool) -> list[str]:
    if not folder.is_dir():
        return ["the folder is missing"]
    problems = [f"no {name}" for name in required if not (folder / name).is_file()]
    for name, endings in LOG_ENDINGS.items():
        path = folder / name
        if not path.is_file():
            continue
        # opened without blocking and checked on the descriptor: a file swapped for a FIFO is refused, not waited on
        with open_regular(path, f"{name} of {shown(folder)}", error=SettingsError, name_path=False) as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - TAIL))
            tail = f.read(TAIL).decode(errors="replace").rstrip()
            if not tail.endswith(endings):
                problems.append(f"{name} is cut short ({size:,} bytes)")
            elif perf and size > FILE_SIZE_LIMIT:
                problems.append(f"{name} is {size:,} bytes, more than the checker's {FILE_SIZE_LIMIT:,}")
            elif perf:
                pattern, line = RESULT_LINES[name]
                f.seek(0)
                if not pattern.search(f.read(FILE_SIZE_LIMIT)):
                    problems.append(f"{name} has no result (no '{line}' line)")
    return problems
